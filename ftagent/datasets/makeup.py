"""The make-up of a raw user file, for the planner: templates with counts, stratified samples, anomalies.

Issue 35: the planner saw 2 rows of a 3,030-row file that mixed three kinds of question and 150 junk
rows; it never learnt the file held distractors. :func:`profile_rows` groups the rows by their
instruction *template* -- the text with every number replaced by ``N`` and whitespace collapsed, so
"What is 12 times 5?" and "What is 87 times 5?" are one template ``What is N times 5?`` -- and counts
the anomalies a data script must handle (empty, duplicate, non-text rows). A free-text file (nearly
every row its own template) is grouped by the template's first words instead, so the view still shows
a few large groups rather than thousands of singletons.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from pydantic import BaseModel, Field

NUMBER_PATTERN = r"[-+]?\d+(?:[.,]\d+)*"  # a number as rows write it; the heuristic planner's data step uses it too
_NUMBER = re.compile(NUMBER_PATTERN)
_SPACE = re.compile(r"\s+")
TOP_TEMPLATES = 8
MIN_SAMPLES = 5  # one sample per group; more per group when there are fewer groups than this
FREE_TEXT_SHARE = 0.5  # more distinct templates than this share of the rows: group by the first words
PREFIX_WORDS = 4


PLACEHOLDERS = "NMKPQRST"  # the 1st, 2nd, ... varying number of a text: "Adding 11 to N gives M." (not "N … N")


def _placeholder(i: int) -> str:
    return PLACEHOLDERS[i] if i < len(PLACEHOLDERS) else "N"


def _number_placeholders(text: str) -> str:
    count = iter(range(10_000))
    return _NUMBER.sub(lambda _m: _placeholder(next(count)), text)


def template_of(text: str, words: int | None = None) -> str:
    """``text`` with its numbers as ``N``, ``M``, ``K``… in order, whitespace collapsed (and cut to
    ``words`` words when given)."""
    out = _SPACE.sub(" ", _number_placeholders(text)).strip()
    if words is not None:
        parts = out.split(" ")
        out = " ".join(parts[:words]) + (" …" if len(parts) > words else "")
    return out[:120]


class Group(BaseModel):
    """Rows sharing one instruction template."""

    template: str
    rows: int
    answer_templates: dict[str, int] = Field(default_factory=dict)  # the most common answer shapes
    # each varying number of the template -> its range and digit counts, e.g. "N": "10–999 (622 distinct;
    # digits 2:60, 3:562)": two samples alone suggested two-digit N only (relay round 4)
    numbers: dict[str, str] = Field(default_factory=dict)
    samples: list[dict[str, Any]] = Field(default_factory=list)  # stratified: the first distinct rows of the group


# what each anomaly example shows (relay round r1: an exact duplicate, a good-looking row, was listed
# without saying why it was there)
ANOMALY_LABELS = {"non_text": "not text", "empty_instruction": "empty instruction", "empty_output": "empty answer",
                  "duplicate": "an exact duplicate of an earlier row"}


class Makeup(BaseModel):
    """What a user file holds (``FTAGENT_NOTES.md`` shows it; the planner reads it)."""

    rows: int
    usable: int  # rows with a non-empty text instruction and output (duplicates included)
    grouped_by: str = "template"  # or "first words" for free text
    distinct_templates: int = 0
    groups: list[Group] = Field(default_factory=list)  # largest first, at most TOP_TEMPLATES
    empty_instruction: int = 0
    empty_output: int = 0
    non_text: int = 0  # instruction or output not a string (a number, a list, null ...)
    # usable rows repeating the (instruction, input, output) of an earlier row: exact duplicates, counted
    # among the usable rows only so that no row is in two anomaly counts (relay round 4: "1,200
    # duplicates" counted junk rows twice; the data script found 1,105)
    duplicates: int = 0
    anomaly_examples: dict[str, dict[str, Any]] = Field(default_factory=dict)  # anomaly kind -> its first row

    def anomalies(self) -> int:
        return self.empty_instruction + self.empty_output + self.non_text + self.duplicates

    def to_markdown(self) -> str:
        """The planner's view: groups with counts, one sample per group, the anomaly counts."""
        lines = [f"Make-up of the file ({self.rows:,} rows, {self.usable:,} with a text instruction and answer; "
                 f"{self.distinct_templates:,} distinct instruction {self.grouped_by}s, numbers that vary shown as N, M, K… in order):"]
        shown = 0
        for g in self.groups:
            shown += g.rows
            answers = "; ".join(f"{json.dumps(t, ensure_ascii=False)} ×{n}" for t, n in g.answer_templates.items())
            ranges = "".join(f"; {name}: {text}" for name, text in g.numbers.items())
            lines.append(f"- {g.rows:,} rows ({g.rows / max(1, self.rows):.0%}): {json.dumps(g.template, ensure_ascii=False)}"
                         f" → answers like {answers}{ranges}")
        rest = self.usable - shown
        if rest > 0:
            lines.append(f"- {rest:,} more usable rows in {max(0, self.distinct_templates - len(self.groups)):,} "
                         "smaller groups")
        bad = [f"{n:,} {what}" for n, what in ((self.empty_instruction, "with an empty or missing instruction"),
                                             (self.empty_output, "with an empty or missing answer"),
                                             (self.non_text, "whose instruction or answer is not text"),
                                             (self.duplicates, "exact duplicates of an earlier row (same "
                                              "instruction, input and output; counted among the usable rows)"))
               if n]
        lines.append("- Anomalies: " + ("; ".join(bad) + " -- process_data.py must drop or repair them (this is "
                                        "about the file's own rows: repeating rows on purpose, to weight a group, "
                                        "is a choice of the plan)"
                                        if bad else "none (no empty, non-text or duplicate rows)"))
        for kind, ex in self.anomaly_examples.items():
            lines.append(f"  - e.g. {ANOMALY_LABELS.get(kind, kind)}: {_clip(ex)}")
        lines.append("Samples, stratified by group, largest group first:")
        lines += [f"- {_clip(row)}" for g in self.groups for row in g.samples]
        return "\n".join(lines)


def _clip(row: dict[str, Any], limit: int = 220) -> str:
    text = json.dumps(row, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + "…"


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def profile_rows(rows: list[dict[str, Any]]) -> Makeup:
    """The make-up of Alpaca-like rows (``instruction``, ``input``, ``output``; values as in the file)."""
    makeup = Makeup(rows=len(rows), usable=0)
    seen: set[str] = set()
    usable: list[tuple[str, dict[str, Any]]] = []
    examples: dict[str, dict[str, Any]] = {}
    for row in rows:
        raw_instruction, raw_output = row.get("instruction"), row.get("output")
        if raw_instruction is not None and _text(raw_instruction) is None or (
                raw_output is not None and _text(raw_output) is None):
            makeup.non_text += 1
            examples.setdefault("non_text", row)
            continue
        instruction = ((raw_instruction or "") + " " + (_text(row.get("input")) or "")).strip()
        if not instruction:
            makeup.empty_instruction += 1
            examples.setdefault("empty_instruction", row)
            continue
        if not (raw_output or "").strip():
            makeup.empty_output += 1
            examples.setdefault("empty_output", row)
            continue
        key = json.dumps([raw_instruction, row.get("input"), raw_output], ensure_ascii=False, default=str)
        if key in seen:  # counted, and still in its group below (the groups count the file's rows)
            makeup.duplicates += 1
            examples.setdefault("duplicate", row)
        seen.add(key)
        usable.append((instruction, row))
    makeup.usable = len(usable)
    makeup.anomaly_examples = examples
    words = None
    numbered = _numbered([text for text, _ in usable])
    keys = [_key(text, found) for (text, _), found in zip(usable, numbered, strict=True)]
    templates = Counter(keys)
    if usable and len(templates) > FREE_TEXT_SHARE * len(usable):
        words, makeup.grouped_by = PREFIX_WORDS, "first-words group"
        keys = [template_of(text, words) for text, _ in usable]
        templates = Counter(keys)
    makeup.distinct_templates = len(templates)
    top = [t for t, _ in templates.most_common(TOP_TEMPLATES)]
    answers: dict[str, Counter[str]] = {t: Counter() for t in top}
    per_group = max(1, -(-MIN_SAMPLES // max(1, len(top))))  # ceil: at least MIN_SAMPLES in all
    samples: dict[str, list[dict[str, Any]]] = {t: [] for t in top}
    outputs = [row["output"] for _, row in usable]
    values: dict[str, list[list[str]]] = {t: [] for t in top}
    for t, found, answer, out_found, (_, row) in zip(keys, numbered, outputs, _numbered(outputs), usable,
                                                     strict=True):
        if t in answers:
            varying = [v for v, constant in found if not constant]
            answers[t][_answer_shape(answer, out_found, varying)[:100]] += 1
            values[t].append(varying)
            sample = {k: row.get(k) for k in ("instruction", "input", "output") if row.get(k)}
            if len(samples[t]) < per_group and sample not in samples[t]:  # distinct (issue 43: a row shown twice)
                samples[t].append(sample)
    makeup.groups = [Group(template=t, rows=templates[t], answer_templates=dict(answers[t].most_common(2)),
                           numbers=_ranges(values[t]) if words is None else {}, samples=samples[t])
                     for t in top]
    return makeup


def _answer_shape(answer: str, found: list[tuple[str, bool]], instruction_values: list[str]) -> str:
    """The answer's template, its numbers named *with* the instruction's: a varying number equal to the
    instruction's N in this row is N; any other gets a name of its own (M, K… after the instruction's),
    so "What is 869 minus 11?" → "858" reads "N" → "M", not "N" → "N" (relay round 4)."""
    parts = _NUMBER.split(answer)
    fresh = iter(range(len(instruction_values), len(instruction_values) + len(found)))
    out = parts[0]
    for (value, constant), rest in zip(found, parts[1:], strict=True):
        if constant:
            out += value
        elif value in instruction_values:
            out += _placeholder(instruction_values.index(value))
        else:
            out += _placeholder(next(fresh))
        out += rest
    return _SPACE.sub(" ", out).strip()[:120]


def _ranges(rows: list[list[str]]) -> dict[str, str]:
    """Each varying number's range over the group's rows and its distinct values by digit count:
    ``{"N": "10–999 (622 distinct; digits 2:60, 3:562)"}``."""
    out: dict[str, str] = {}
    for pos in range(min((len(r) for r in rows), default=0)):
        distinct: set[float] = set()
        for r in rows:
            try:
                distinct.add(float(r[pos].replace(",", "")))
            except ValueError:
                continue
        if not distinct:
            continue
        digits = Counter(len(str(int(abs(v)))) for v in distinct)
        by_digits = ", ".join(f"{d}:{n:,}" for d, n in sorted(digits.items()))
        out[_placeholder(pos)] = (f"{_fmt(min(distinct))}–{_fmt(max(distinct))} ({len(distinct):,} distinct; "
                                  f"digits {by_digits})")
    return out


def _fmt(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:g}"


def template_keys(texts: list[str]) -> list[str]:
    """Each text's template, constants kept literal (see :func:`_template_keys`)."""
    return _template_keys(texts)


def _template_keys(texts: list[str]) -> list[str]:
    """Each text's template, with a number kept literal where it is (nearly) constant in its template:
    "What is N times 3?" and "What is N times 5?" are two kinds of row, not one "What is N times N?"."""
    return [_key(text, found) for text, found in zip(texts, _numbered(texts), strict=True)]


def _numbered(texts: list[str]) -> list[list[tuple[str, bool]]]:
    """Each text's numbers in order, each with whether it is constant in its plain template: a position
    is constant when it takes at most 5 values, and at most one per 4 rows of the template."""
    numbers = [_NUMBER.findall(text) for text in texts]
    plain = [template_of(text) for text in texts]
    values: dict[tuple[str, int], set[str]] = {}
    sizes = Counter(plain)
    for t, found in zip(plain, numbers, strict=True):
        for i, value in enumerate(found):
            values.setdefault((t, i), set()).add(value)
    return [[(value, len(values[(t, i)]) <= min(5, sizes[t] // 4)) for i, value in enumerate(found)]
            for t, found in zip(plain, numbers, strict=True)]


def _key(text: str, found: list[tuple[str, bool]]) -> str:
    """``text`` with its varying numbers as N, M, K… in order and its constant ones literal."""
    if not any(constant for _, constant in found):
        return template_of(text)
    parts = _NUMBER.split(text)  # text, number, text, ... (the pattern has no capturing group)
    varying = iter(range(len(found)))
    kept = parts[0] + "".join((value if constant else _placeholder(next(varying))) + rest
                              for (value, constant), rest in zip(found, parts[1:], strict=True))
    return _SPACE.sub(" ", kept).strip()[:120]


COVERAGE_WARN = 0.5  # a template whose items fill this share of its input space gets a warning
MIN_TEMPLATE_ITEMS = 10


class SpaceCoverage(BaseModel):
    """How much of a templated question space the benchmark's own items fill."""

    template: str  # with N for the numbers that vary
    items: int  # distinct items of the template
    space: int  # distinct questions the template can make: the product of each varying number's range
    ranges: list[tuple[int, int]] = []  # each varying number's [min, max] as seen, in template order (N, M, ...)

    def ranges_text(self) -> str:
        """``N from 10 to 99, M from 1 to 9``: the varying numbers' ranges (issue 35, relay round 5: the
        planner had to infer which values the benchmark's items take)."""
        return ", ".join(f"{_placeholder(i)} from {low} to {high}" for i, (low, high) in enumerate(self.ranges))

    @property
    def share(self) -> float:
        return self.items / self.space if self.space else 0.0


def input_space_coverage(questions: list[str], scale: float = 1.0) -> list[SpaceCoverage]:
    """Templates (≥ MIN_TEMPLATE_ITEMS distinct items, integers only) whose items fill at least
    COVERAGE_WARN of their space, largest share first.

    The heuristic (issue 35): group the questions by template (:func:`_template_keys`: the numbers that
    vary become N); a varying integer is taken to range over [min, max] of the values seen, and the space
    is the product of those ranges. "What is N times 3?" with N seen from 10 to 99 has a space of 90; 80
    distinct items fill 89 % of it, so templated training questions of that form would mostly *be*
    benchmark items. It underestimates a space whose values were sampled from a wider range than seen,
    which only makes the warning rarer. ``scale``: the items there are for each one given (the heuristic
    planner sees validation items only, about half of them: 2); the share test counts ``items × scale``.
    """
    out = [cover for cover, _ in template_spaces(questions) if cover.share * scale >= COVERAGE_WARN]
    return sorted(out, key=lambda c: -c.share)


def template_spaces(questions: list[str]) -> list[tuple[SpaceCoverage, list[str]]]:
    """Every template of ``questions`` with ≥ MIN_TEMPLATE_ITEMS distinct questions and integer numbers that
    vary, with its space (see :func:`input_space_coverage`) and its questions; the contamination scan's
    input-space check (:mod:`ftagent.datasets.numeric_scan`) reads the same estimate."""
    distinct = sorted(set(questions))
    keys = _template_keys(distinct)
    groups: dict[str, list[str]] = {}
    for key, text in zip(keys, distinct, strict=True):
        groups.setdefault(key, []).append(text)
    out = []
    for key, texts in groups.items():
        if len(texts) < MIN_TEMPLATE_ITEMS or not re.search(r"\bN\b", key):
            continue
        numbers = [_NUMBER.findall(t) for t in texts]
        if len({len(n) for n in numbers}) != 1 or any("." in v or "," in v for n in numbers for v in n):
            continue
        space, ranges = 1, []
        for pos in range(len(numbers[0])):
            values = {int(n[pos]) for n in numbers}
            if len(values) > 1:
                space *= max(values) - min(values) + 1
                ranges.append((min(values), max(values)))
        out.append((SpaceCoverage(template=key, items=len(texts), space=space, ranges=ranges), texts))
    return out
