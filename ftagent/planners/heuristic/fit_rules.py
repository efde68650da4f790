"""The row rules of the heuristic planner's data step, pasted verbatim into its ``process_data.py``.

One owner for both sides: :mod:`.data_fit` (the planner, which decides which row shapes fit the benchmark)
and the generated script (which applies the decision to every row) call these same functions; the script
gets their source through :func:`script_source`. They use ``re`` and the module global ``NUMBER_PATTERN``
only (the make-up's number rule, :data:`ftagent.datasets.makeup.NUMBER_PATTERN`), so the pasted copy runs
without ftagent.
"""

from __future__ import annotations

import inspect
import re

from ftagent.datasets.makeup import NUMBER_PATTERN

KINDS = ("x+c", "x*c", "c-x", "x+y", "x-y", "x*y")  # the relations tried, simplest first
UNARY = ("x+c", "x*c", "c-x")


def numbers_of(text):
    """The numbers of ``text`` in order, as written (``1,000`` and ``-3.5`` are one number each)."""
    return re.findall(NUMBER_PATTERN, text or "")


def as_value(number):
    """A number as written to a float (thousands separators dropped)."""
    return float(number.replace(",", ""))


def shape_of(text):
    """The row's shape: its numbers as ``#`` and whitespace collapsed (the script's cluster key)."""
    return " ".join(re.sub(NUMBER_PATTERN, "#", text or "").split())


def apply_relation(kind, c, args):
    """The answer ``kind`` gives for the operands ``args`` and the constant ``c``."""
    x = args[0]
    y = args[1] if len(args) > 1 else 0.0
    return {"x+c": x + c, "x*c": x * c, "c-x": c - x, "x+y": x + y, "x-y": x - y, "x*y": x * y}[kind]


def close(a, b):
    """Equal up to rounding (a relative 1e-6)."""
    return abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b))


def fits(kind, c, operands, question, answer):
    """Whether the answer's last number is ``kind`` of the question's numbers at ``operands``."""
    numbers, said = numbers_of(question), numbers_of(answer)
    if not said or any(i >= len(numbers) for i in operands):
        return False
    return close(apply_relation(kind, c, [as_value(numbers[i]) for i in operands]), as_value(said[-1]))


def number_text(value):
    """``80`` for 80.0, ``2.5`` for 2.5."""
    return str(int(round(value))) if close(value, round(value)) else repr(value)


def fill(parts, numbers, values):
    """Text from its pieces between numbers, with ``values`` (slot -> text) replacing those numbers."""
    out = parts[0]
    for i, rest in enumerate(parts[1:]):
        out += values.get(i, numbers[i]) + rest
    return out


def select_rows(rows, spec):
    """The rows that fit the benchmark, in its format (``spec``: :meth:`.data_fit.Selection.script_spec`).

    Duplicates are dropped; a row is kept when its shape is a kept template's and the rule gives its
    answer; its answer is written in the gold's form (unless already boxed); its question in the benchmark's wording when every
    operand has a digit count the benchmark's items do not use there; a row with the items' digit counts is
    dropped where the items fill most of that space (``crowded``: it would ask an item in other words, issue
    39), else it keeps its own words plus the closing sentence.
    """
    seen, out = set(), []
    wording = spec.get("wording")
    for row in rows:
        question = (str(row.get("instruction") or "") + " " + str(row.get("input") or "")).strip()
        key = (question, str(row.get("output") or ""))
        if key in seen:
            continue
        seen.add(key)
        options = spec["keep"].get(shape_of(question)) or []
        operands = next((o for o in options if fits(spec["kind"], spec["c"], o, question, key[1])), None)
        if operands is None:
            continue
        row = dict(row)
        if wording:
            numbers, answer = numbers_of(question), numbers_of(key[1])[-1]
            if "\\boxed{" not in key[1]:  # an answer already boxed (worked steps too) is what scorers read
                row["output"] = fill(wording["answer_parts"], wording["answer_numbers"],
                                     {len(wording["answer_numbers"]) - 1: answer})
            values = {slot: numbers[o] for slot, o in zip(wording["slots"], operands, strict=True)}
            outside = all(len(re.sub(r"\D", "", v)) not in wording["digits"][slot] for slot, v in values.items())
            if wording["renders"] and not outside and wording.get("crowded"):
                continue  # the items fill that space: an item in other words, the template match's hit (issue 39)
            if wording["renders"] and outside:
                row.update(instruction=fill(wording["parts"], wording["numbers"], values), input="")
            elif wording["tail"] and wording["tail"] not in question:
                row["instruction"] = str(row.get("instruction") or "").rstrip() + " " + wording["tail"]
        out.append(row)
    return out


def script_source():
    """The functions above as source text for ``process_data.py`` (after ``NUMBER_PATTERN = ...``)."""
    funcs = (numbers_of, as_value, shape_of, apply_relation, close, fits, number_text, fill, select_rows)
    return "\n\n".join(inspect.getsource(f) for f in funcs)
