"""The answers a trivial baseline tries on a domain sub-task: constants, and rules that ignore the question.

Each :class:`Candidate` turns an item into the output a model would write; its ``name`` says what it is in
the baseline's line (``always '{"answer": "1"}'``, ``always the first choice``). The candidates of one
sub-task (:func:`candidates`) are what a constant answer can be there:

* the most frequent gold answers of the choice rows (those given at least twice), and, where every gold is
  different (free text: BioProBench GEN's protocols), a few of the golds themselves: the best of them on
  the choice rows is the most typical gold text (issue 43: GEN's baseline under-reported, 10.4 where a
  generic protocol text scores 14.8);
* :data:`COMMON_CONSTANTS` and a family's own (:data:`FAMILY_CONSTANTS`: PANORAMA's codes, a generic
  protocol text);
* rules that ignore the question where the answer depends on the item's own options: PQA "always the
  first choice" (and the second, ...), ORD "the steps in the given order".

Each text candidate is written in the forms a model writes it (:func:`wrapped`): bare, ``{"answer": …}``,
``Final Answer: …`` and the family's own tags.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: constants every domain sub-dataset also tries (yes/no, small counts, option letters, small molecules:
#: on ChemCoTBench's solubility items water ("O") "improves" 100 % of the sources, benzene 95 %)
COMMON_CONSTANTS = ("Yes", "No", "True", "False", "0", "1", "2", "3", "A", "B", "C", "D", "c1ccccc1", "O", "CCO")
TOP_GOLDS = 10  # the most frequent gold answers tried per sub-dataset (those given at least twice)
TEXT_GOLDS = 8  # golds tried as they are where (nearly) every gold is different
GENERIC_PROTOCOL = (
    "1. Prepare all reagents, buffers and samples according to the manufacturer's instructions.\n"
    "2. Mix the sample with the reaction buffer and incubate at 37 °C for 30 min.\n"
    "3. Centrifuge the samples at 10,000 × g for 10 min at 4 °C and discard the supernatant.\n"
    "4. Wash the pellet twice with PBS and resuspend it in fresh buffer.\n"
    "5. Measure the samples and analyze the data.")
#: constants one family's sub-datasets also try (PANORAMA NOC4PC's three codes; a protocol that fits any
#: protocol question, for BioProBench GEN)
FAMILY_CONSTANTS = {"panorama": ("ALLOW", "102", "103"), "bioprobench": (GENERIC_PROTOCOL,)}
_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth")


@dataclass(frozen=True)
class Candidate:
    """One trivial answer: ``output(item)`` is what is written to the scorer; ``name`` says what it is;
    ``text``: the output itself when it is the same for every item (None for a rule)."""

    name: str
    output: Callable[[dict[str, Any]], str]
    text: str | None = None


def wrapped(family: str, value: str) -> list[str]:
    """``value`` in the forms a model writes it: bare, ``{"answer": …}``, ``Final Answer: …`` and the
    family's own (PANORAMA NOC4PC's ``{"code": …}``, BioProBench's answer tags, with a confidence for PQA)."""
    forms = [value, json.dumps({"answer": value}, ensure_ascii=False), f"Final Answer: {value}"]
    if family == "panorama":
        forms.append(json.dumps({"code": value}))
    if family == "bioprobench":
        from ftagent.benchmarks.domain.bioprobench import END, START

        forms += [f"{START}{value}{END}", f"{START}{value} & 100{END}"]
    return forms


def _constant(text: str) -> Candidate:
    def output(_item: dict[str, Any]) -> str:
        return text

    return Candidate(name=f"always {text!r}" if len(text) <= 60 else f"always the text {text[:40]!r}…",
                     output=output, text=text)


def _text_values(golds: list[str]) -> list[str]:
    """The golds tried as constants: the most frequent ones given at least twice, or, where (nearly) every
    gold is different, up to :data:`TEXT_GOLDS` of them spread over the rows."""
    frequent = [g for g, n in Counter(g for g in golds if g).most_common(TOP_GOLDS) if n > 1]
    distinct = list(dict.fromkeys(g for g in golds if g))
    if frequent or len(distinct) < 2:
        return frequent
    step = max(1, len(distinct) // TEXT_GOLDS)
    return distinct[::step][:TEXT_GOLDS]


def _rules(family: str, subset: str, items: list[dict[str, Any]]) -> list[Candidate]:
    """Answers that depend only on the item's own options, never on the question."""
    if family != "bioprobench":
        return []
    from ftagent.benchmarks.domain.bioprobench import END, START

    if subset.upper() == "PQA":
        most = min(len(_ORDINALS), max((len(_choices(it)) for it in items), default=0))
        return [Candidate(name=f"always the {_ORDINALS[k]} choice", output=_choice_rule(k, START, END))
                for k in range(most)]
    if subset.upper() == "ORD":
        return [Candidate(name="always the steps in the given order",
                          output=lambda it: f"{START}{list(range(len(it.get('wrong_steps') or [])))}{END}")]
    return []


def _choice_rule(k: int, start: str, end: str) -> Callable[[dict[str, Any]], str]:
    def output(item: dict[str, Any]) -> str:
        return f"{start}{_nth(_choices(item), k)} & 100{end}"

    return output


def _choices(item: dict[str, Any]) -> list[str]:
    choices = item.get("choices")
    if isinstance(choices, str):
        try:
            choices = json.loads(choices)
        except ValueError:
            return []
    return [str(c) for c in choices] if isinstance(choices, list) else []


def _nth(choices: list[str], k: int) -> str:
    return choices[k] if k < len(choices) else (choices[-1] if choices else "")


def candidates(family: str, subset: str, golds: list[str], items: list[dict[str, Any]]) -> list[Candidate]:
    """Every candidate of one sub-task, chosen among on the choice rows (``golds``/``items``: theirs)."""
    values = _text_values(golds)
    values += [c for c in (*COMMON_CONSTANTS, *FAMILY_CONSTANTS.get(family, ())) if c not in values]
    texts = [_constant(form) for value in values for form in wrapped(family, value)]
    return _rules(family, subset, items) + texts
