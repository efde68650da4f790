"""The content match of numeric items (issue 39, red team B3): an item whose answer is a number is its numbers and
its gold, in whatever words they are asked.

The template match (:mod:`ftagent.datasets.template_scan`) reads a fixed list of phrasings; the red team passed
it with seven more ("the total of A and B", "Increase A by B", named operands, the item's digits with a Spanish
or Chinese operator word ...). This match does not read words at all. Precisely:

* **A numeric item** is an item whose gold answer holds one number (:func:`answer_number`: the gold itself, the
  content of its last ``\\boxed{}``, or what follows its last ``####``) and whose question -- its primary field
  less the benchmark's template sentences (:func:`ftagent.datasets.scan_text.template_threshold`) -- holds at
  least one number, with at least :data:`MIN_DIGITS` digits in its numbers and gold together ("What is 2 + 2?"
  -> 4 is too common to flag a row by; such items are left to the exact and template matches). Numbers are
  whole tokens of :func:`ftagent.datasets.scan_text.normalise`: any script's digits, English number words, a
  sign and a decimal part kept on the number ("-25", "68.25" are not 25 and 68), leading zeros and trailing
  decimal zeros dropped ("025" = 25, "68.0" = 68), thousands separators removed.
* **A turn asks it** (:meth:`NumericIndex.turn_hits`): a user turn of the row (``instruction`` + ``input``, each
  ``history`` question; :mod:`ftagent.datasets.trained_text`) whose numbers, less the template sentences', hold
  the item's numbers as a *contiguous run* in any order, and no other number of the sentences the run is in (the
  numbers of "Let x = 25 and y = 68. What is x + y? Answer in 1 line." are ``25 68 | 1``; the gold pins the
  operation, so the order need not: "25 - 68" is -43, not 68 - 25's 43) -- an item of *one* number only when it
  is the turn's only number ("How many positive divisors does 100 have?" -> 9 is not asked by "A box holds 100
  pens. 91 are sold. How many are left?") --, one of the answers trained on that turn has the item's gold as its
  *final number* (:func:`final_number`: its last ``\\boxed{}``, else what follows its last ``####``, else its last
  number), and the gold is not also one of the question's other numbers ("Which of 25, 68, 12 and 93 is the
  largest?" -> 93 does not ask 25 + 68).
* **A system text states it** (:meth:`NumericIndex.text_hits`): the row's ``system`` or train.yaml's
  ``default_system`` holds the numbers of an item of two numbers or more as a contiguous run with the gold right
  before or after it ("Solved example: What is 25 + 68? \\boxed{93}": ``25 68 93``; "Scores: 100, 9" states
  nothing: one number beside another is too common).

Why these limits keep honest rows clear: other numbers are other tokens; the same numbers in another task have
another final answer; a sentence that holds an item's numbers among others ("Ana has 42 apples, buys 49 more and
gives away 21" -> 70 = 49 + 21) is another question, whatever its answer; a word problem whose sentence holds
exactly two item numbers *and* whose final answer is their item's gold asks that item in words (it is a hit, on
purpose). A user turn or an answer that *states* an item ("25 + 68 = 93" in a worked answer, a solved example
before another question) is not a hit on its own -- three numbers where one is the sum of two others are common
in word problems -- but it counts toward the input-space check (:func:`space_flags`). Measured on 20,000
synthetic two-digit word problems with worked answers (docs/datasets.md): no row flagged but those whose one
sentence holds an item's two numbers and whose answer is their sum.

Not in the class (not guaranteed, left to the selection part of validation and, at scale, to the input-space
check): a number split across two turns or by spaces ("2 5"), Roman numerals, hex, base64 or another encoding,
numbers in words of a language other than English, an operand written as an expression ("25 - (-68)" is
``25 -68``), a question that adds a number to the item's sentence ("What is 25 + 68 + 0?"), an item stated in
a user turn or an answer, an answer that is not a number or is not the final number of its answer text.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import BaseModel

from ftagent.datasets.makeup import SpaceCoverage, template_spaces
from ftagent.datasets.scan_text import Item, canonical_number, is_number, normalise, segments, sentences

MIN_DIGITS = 4  # an item's numbers and gold together carry at least this many digits
COVERAGE_FLAG = 0.25  # the share of a templated space's items the data answers that flags it (docs/datasets.md)
MAX_ENUMERABLE = 1_000_000  # a space this small can be written out whole in one data.json
_BOXED = re.compile(r"\\boxed\s*\{")
_PLAIN = re.compile(r"-?\d+(?:\.\d+)?")


def _numbers(tokens: Sequence[str]) -> list[str]:
    return [t for t in tokens if is_number(t)]


def _boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (nested braces kept), None without one."""
    starts = [m.end() for m in _BOXED.finditer(text)]
    if not starts:
        return None
    depth, start = 1, starts[-1]
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i]
    return text[start:]


def _span(text: str) -> str:
    boxed = _boxed(text)
    if boxed is not None:
        return boxed
    return text.rsplit("####", 1)[1] if "####" in text else text


def _span_numbers(text: str) -> list[str]:
    span = _span(text or "").strip()
    if _PLAIN.fullmatch(span):  # "93", "\\boxed{93}": no need to normalise
        return [canonical_number(span)]
    return _numbers(normalise(span))


def answer_number(text: str) -> str | None:
    """A gold answer's number: the one number of its last ``\\boxed{}``, of what follows its last ``####``, or of
    the whole text; None when that part holds no number or several ("3/4", a list)."""
    found = _span_numbers(text)
    return found[0] if len(found) == 1 else None


def final_number(text: str) -> str | None:
    """An answer's final number: the last number of its last ``\\boxed{}``, of what follows its last ``####``,
    else of the whole text; None without a number."""
    found = _span_numbers(text)
    return found[-1] if found else None


def _digits(numbers: Sequence[str]) -> int:
    return sum(len(n.replace("-", "").replace(".", "")) for n in numbers)


@dataclass(frozen=True)
class NumericItem:
    item_id: str
    question: str  # the primary field as written (the input-space check groups items by its template)
    numbers: tuple[str, ...]  # sorted: the multiset the question asks about
    gold: str


class NumericIndex:
    """The numeric items of a benchmark, by their numbers (see the module docstring)."""

    def __init__(self, items: Mapping[str, Item], answers: Mapping[str, str], template: set[str]) -> None:
        self.template = template
        self.items: list[NumericItem] = []
        self.by_numbers: dict[tuple[str, ...], list[NumericItem]] = {}
        for item_id, item in items.items():
            gold = answer_number(answers.get(item_id, ""))
            if gold is None:
                continue
            question = segments(item)[0] if segments(item) else ""
            numbers = tuple(sorted(self.numbers_of(question)))
            if not numbers or _digits((*numbers, gold)) < MIN_DIGITS:
                continue
            found = NumericItem(item_id, question, numbers, gold)
            self.items.append(found)
            self.by_numbers.setdefault(numbers, []).append(found)
        self.sizes = sorted({len(k) for k in self.by_numbers})
        self.vocab = {n for k in self.by_numbers for n in k}

    def __len__(self) -> int:
        return len(self.items)

    def numbers_of(self, text: str) -> list[str]:
        """The numbers of ``text`` outside the benchmark's template sentences, in order."""
        return self.numbers_in(sentences(text)).values

    def numbers_in(self, found: Sequence[str]) -> Numbers:
        """:meth:`numbers_of` a text already split into :func:`~ftagent.datasets.scan_text.sentences`, with the
        sentence each number is in."""
        out = Numbers([], [])
        for i, sentence in enumerate(s for s in found if s not in self.template):
            for t in sentence.split():
                if is_number(t):
                    out.values.append(t)
                    out.sentence.append(i)
        return out

    def _runs(self, numbers: Sequence[str]):
        """``(start, end, items)`` of every contiguous run of ``numbers`` that is some items' numbers."""
        if self.vocab.isdisjoint(numbers):
            return
        for size in self.sizes:
            for start in range(len(numbers) - size + 1):
                window = numbers[start:start + size]
                if self.vocab.issuperset(window):
                    found = self.by_numbers.get(tuple(sorted(window)))
                    if found:
                        yield start, start + size, found

    def turn_hits(self, numbers: Numbers, finals: Sequence[str]) -> set[str]:
        """Every item a user turn asks: its numbers hold the item's, and nothing more, in the sentences they are in
        (an item of one number: the turn's only number), an answer's final number (``finals``) is the gold, and the
        gold is none of the question's other numbers."""
        out: set[str] = set()
        if not finals:
            return out
        values = numbers.values
        counts = Counter(values)
        for start, end, found in self._runs(values):
            inside = Counter(values[start:end])
            alone = numbers.whole(start, end)
            for item in found:
                bounded = alone if len(item.numbers) > 1 else len(values) == 1
                if bounded and item.gold in finals and counts[item.gold] <= inside[item.gold]:
                    out.add(item.item_id)
        return out

    def text_hits(self, numbers: Numbers) -> set[str]:
        """Every item of two numbers or more a text states: its numbers as a run with the gold right before or after
        the run."""
        out: set[str] = set()
        values = numbers.values
        for start, end, found in self._runs(values):
            after = values[end] if end < len(values) else None
            before = values[start - 1] if start else None
            out.update(item.item_id for item in found if len(item.numbers) > 1 and item.gold in (after, before))
        return out


@dataclass(frozen=True)
class Numbers:
    """A text's numbers in order, and the index of the sentence each one is in."""

    values: list[str]
    sentence: list[int]

    def whole(self, start: int, end: int) -> bool:
        """``values[start:end]`` are all the numbers of the sentences they are in."""
        first, last = self.sentence[start], self.sentence[end - 1]
        return ((start == 0 or self.sentence[start - 1] != first)
                and (end == len(self.values) or self.sentence[end] != last))


class SpaceFlag(BaseModel):
    """A templated input space the training data answers a large share of."""

    space: SpaceCoverage
    answered: int  # items of the template the data answers

    @property
    def share(self) -> float:
        return self.answered / self.space.items if self.space.items else 0.0

    def words(self) -> str:
        return (f"the training data answers {self.answered} of the benchmark's {self.space.items} items of the form "
                f"`{self.space.template}` ({self.share:.0%}; flagged from {COVERAGE_FLAG:.0%}): that form's input "
                f"space ({self.space.ranges_text()}) is {self.space.space:,} questions, few enough to write out "
                "whole, so data that answers this share of it holds as much of the selection part and the test "
                "split, which no check of single items can tell from learning; use numbers outside these ranges")


def space_flags(index: NumericIndex, answered: set[str]) -> list[SpaceFlag]:
    """The input-space check: each template of the numeric items (≥ ``makeup.MIN_TEMPLATE_ITEMS`` items, integer
    numbers; :func:`ftagent.datasets.makeup.template_spaces`) whose space has at most :data:`MAX_ENUMERABLE`
    questions and of whose items the data answers (``answered``: a turn asks it or a text states it, answers
    included) at least :data:`COVERAGE_FLAG`.

    Items are drawn from their space without regard to the data, so the share of them the data answers
    estimates the share of the space it answers -- the share of the selection part and the test split it holds.
    Data built knowing the items (the demo's, which leaves them out) answers none; data with numbers outside
    the items' ranges answers none."""
    if not answered:
        return []
    by_question: dict[str, list[str]] = {}
    for item in index.items:
        by_question.setdefault(item.question, []).append(item.item_id)
    out = []
    for space, questions in template_spaces(list(by_question)):
        if space.space > MAX_ENUMERABLE:
            continue
        ids = [i for q in questions for i in by_question[q]]
        hit = sum(1 for i in ids if i in answered)
        flag = SpaceFlag(space=space.model_copy(update={"items": len(ids)}), answered=hit)
        if flag.share >= COVERAGE_FLAG:
            out.append(flag)
    return out
