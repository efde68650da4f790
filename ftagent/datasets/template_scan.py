"""The template match of the contamination scan (issue 39 item 5): a training question that asks a benchmark
item again in other words is a hit.

A text's *signature* is its normalised tokens (:func:`ftagent.datasets.contamination.normalise`: NFKC,
invisible characters, confusables, any script's digits, spelled-out numbers, contractions, operator symbols
as words) with

* the arithmetic phrasings written one way: "the sum of A and B", "add A and B", "add A to B", "A added to
  B", "A increased by B" → ``A plus B``; "the product of A and B", "multiply A by B", "A multiplied by B" →
  ``A times B``; "the difference between A and B", "subtract B from A", "A take away B", "A decreased by B"
  → ``A minus B``; "A divided by B", "divide A by B", "the quotient of A and B" → ``A over B``;
* the question's scaffolding dropped: the contamination scan's function words
  (:data:`~ftagent.datasets.contamination.STOPWORDS`: what, is, the, find, answer ...) and the verbs and
  words that only ask (:data:`SCAFFOLD`: calculate, compute, evaluate, solve, equals, value, result ...);
* the benchmark's own template sentences (found in :func:`~ftagent.datasets.contamination.template_threshold`
  items or more, e.g. "Put the final answer in \\boxed{}.") left out of the item's side and the row's.

So "What is 12 + 45?", "What's twelve plus forty-five?", "12 + 45 = ?" and "Calculate the sum of 12 and 45."
all have the signature ``12 plus 45``. An item whose signature holds a number and a word (its *template*,
"N plus M", and its numbers) is hit by a row whose question side (instruction + input) holds that signature
as a contiguous run, or the signature with the two operands of ``plus`` or ``times`` swapped (the operation
commutes: "45 + 12" asks "12 + 45"), unless the run is part of a longer expression (an operation word right
before or after it: "12 + 45 + 3" is another question). Numbers are whole tokens: "112 + 45" does not hold
"12 + 45"; other numbers, another operation, or the template outside the items' numbers are not hits.

Only the question side is compared: an output that computes "12 + 45" on the way to another answer is not
asking the item (the exact and n-gram checks still compare outputs).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from ftagent.datasets.scan_text import STOPWORDS, is_number, normalise, template_threshold
from ftagent.datasets.scan_text import sentences as _sentences

OPERATIONS = ("plus", "minus", "times", "over")
COMMUTATIVE = ("plus", "times")
SCAFFOLD = frozenset(
    "calculate compute evaluate solve determine work out tell show me equal equals value result simplify "
    "quick quickly number get say reply respond just only exactly final please kindly".split())

# The phrasings above in words, by the operation they are read as (the planner's rule lists them,
# :func:`ftagent.datasets.contamination.rule_words`; tests check each against :func:`signature`).
READ_AS = (
    ("plus", ("the sum of A and B", "add A and B", "add A to B", "A added to B", "A increased by B")),
    ("times", ("the product of A and B", "multiply A by B", "A multiplied by B")),
    ("minus", ("the difference between A and B", "subtract B from A", "A take away B", "A decreased by B")),
    ("over", ("A divided by B", "divide A by B", "the quotient of A and B")),
)


def read_as_words() -> str:
    """``READ_AS`` in one line: "`the sum of A and B`, ... read as `A plus B`; ... as `A times B`; ..."."""
    parts = [", ".join(f"`{p}`" for p in phrases) + (" read as" if i == 0 else " as") + f" `A {op} B`"
             for i, (op, phrases) in enumerate(READ_AS)]
    return "; ".join(parts)


# a number token of scan_text.normalise, whole; tokens are joined by single spaces, so a token boundary is (?<!\S)/(?!\S)
_N = r"(-?\d+(?:\.\d+)*)"
_PHRASES = tuple((re.compile(p), r) for p, r in (
    (rf"(?<!\S)sum of {_N} and {_N}(?!\S)", r"\1 plus \2"),
    (rf"(?<!\S)add {_N} (?:and|to|with) {_N}(?!\S)", r"\1 plus \2"),
    (rf"(?<!\S){_N} added to {_N}(?!\S)", r"\2 plus \1"),
    (rf"(?<!\S){_N} increased by {_N}(?!\S)", r"\1 plus \2"),
    (rf"(?<!\S)product of {_N} and {_N}(?!\S)", r"\1 times \2"),
    (rf"(?<!\S)multiply {_N} (?:by|and|with) {_N}(?!\S)", r"\1 times \2"),
    (rf"(?<!\S){_N} multiplied (?:by|with) {_N}(?!\S)", r"\1 times \2"),
    (rf"(?<!\S)difference (?:of|between) {_N} and {_N}(?!\S)", r"\1 minus \2"),
    (rf"(?<!\S)subtract {_N} from {_N}(?!\S)", r"\2 minus \1"),
    (rf"(?<!\S){_N} subtracted from {_N}(?!\S)", r"\2 minus \1"),
    (rf"(?<!\S){_N} (?:take away|decreased by|less) {_N}(?!\S)", r"\1 minus \2"),
    (rf"(?<!\S){_N} divided by {_N}(?!\S)", r"\1 over \2"),
    (rf"(?<!\S)divide {_N} by {_N}(?!\S)", r"\1 over \2"),
    (rf"(?<!\S)quotient of {_N} and {_N}(?!\S)", r"\1 over \2"),
))


def _drop(tokens: list[str]) -> list[str]:
    """``tokens`` without scaffolding; an operation word between two numbers always stays ("over" is also a
    function word: dropped, "84 / 12" had the signature ``84 12``, no template, and no division item was ever
    matched -- relay round r1)."""
    return [t for i, t in enumerate(tokens)
            if (t in OPERATIONS and 0 < i < len(tokens) - 1 and is_number(tokens[i - 1]) and is_number(tokens[i + 1]))
            or (t not in STOPWORDS and t not in SCAFFOLD)]


_TRIGGERS = frozenset("sum add added increased product multiply multiplied difference subtract subtracted take "
                      "decreased less divided divide quotient".split())


def _signature_of(joined: str) -> list[str]:
    """The signature of normalised tokens joined by spaces."""
    tokens = joined.split()
    if not _TRIGGERS.isdisjoint(tokens):
        for pattern, repl in _PHRASES:
            joined = pattern.sub(repl, joined)
        tokens = joined.split()
    return _drop(tokens)


def signature(text: str) -> list[str]:
    """The signature of ``text`` (see the module docstring)."""
    return _signature_of(" ".join(normalise(text)))


def _sentence_signature(sentences: list[str], template: set[str]) -> list[str]:
    """The signature of the sentences (each ``contamination._sentences`` form: normalised tokens joined by
    spaces) that are not template."""
    return [t for s in sentences if s not in template for t in _signature_of(s)]


def _sentence_starts(sentences: list[str], template: set[str]) -> set[int]:
    """Where each sentence's part of :func:`_sentence_signature` begins (its index in the signature)."""
    starts, at = set(), 0
    for s in sentences:
        if s not in template:
            starts.add(at)
            at += len(_signature_of(s))
    return starts


def is_template(sig: Sequence[str]) -> bool:
    """A signature worth matching: a number and a word (a bare number or bare words are too generic)."""
    return len(sig) >= 2 and any(is_number(t) for t in sig) and any(not is_number(t) for t in sig)


def variants(sig: Sequence[str]) -> set[tuple[str, ...]]:
    """``sig`` and the forms with the operands of one commuting operation (or all of them) swapped."""
    out = {tuple(sig)}
    swaps = [i for i in range(1, len(sig) - 1)
             if sig[i] in COMMUTATIVE and is_number(sig[i - 1]) and is_number(sig[i + 1])]
    for chosen in ([[i] for i in swaps] + ([swaps] if len(swaps) > 1 else [])):
        new = list(sig)
        for i in chosen:
            new[i - 1], new[i + 1] = new[i + 1], new[i - 1]
        out.add(tuple(new))
    return out


class TemplateIndex:
    """Item signatures (with their commuted forms) → item id, and the benchmark's template sentences."""

    def __init__(self, items: Mapping[str, str | Sequence[str]]) -> None:
        primary = {item_id: (item if isinstance(item, str) else (list(item) or [""])[0])
                   for item_id, item in items.items()}
        sentences = {item_id: _sentences(text) for item_id, text in primary.items()}
        shared: dict[str, int] = {}
        for found in sentences.values():
            for s in set(found):
                shared[s] = shared.get(s, 0) + 1
        limit = template_threshold(len(items))
        self.template = {s for s, n in shared.items() if n >= limit and len(items) > 1}
        self.index: dict[tuple[str, ...], str] = {}
        self.originals: list[tuple[str, ...]] = []  # each item's own signature (no commuted forms)
        for item_id, found in sentences.items():
            sig = _sentence_signature(found, self.template)
            if is_template(sig):
                self.originals.append(tuple(sig))
                for form in variants(sig):
                    self.index.setdefault(form, item_id)
        self.lengths = sorted({len(k) for k in self.index})
        self.firsts = {k[0] for k in self.index}

    def __len__(self) -> int:
        return len(self.index)

    def hit(self, question: str) -> tuple[str, tuple[str, ...]] | None:
        """``(item id, matched signature)`` of the first item whose template and numbers ``question`` asks."""
        return self.hit_sentences(_sentences(question)) if self.index else None

    def hit_sentences(self, found: list[str]) -> tuple[str, tuple[str, ...]] | None:
        """:meth:`hit` of a question already split into :func:`~ftagent.datasets.scan_text.sentences`."""
        if not self.index:
            return None
        sig = _sentence_signature(found, self.template)
        starts = _sentence_starts(found, self.template)  # an expression ends with its sentence: "Multiply 16
        # by 3. Plus, show your work." asks 16 × 3 (its next sentence's "plus" hid the hit -- relay round r1)
        bounds = sorted(starts | {len(sig)})
        for start, first in enumerate(sig):
            if first not in self.firsts:
                continue
            if start not in starts and sig[start - 1] in OPERATIONS:
                continue  # the run continues an expression that started before it
            for size in self.lengths:
                end = start + size
                if end > len(sig):
                    break
                window = tuple(sig[start:end])
                if window in self.index and not (end < len(sig) and end not in starts and sig[end] in OPERATIONS) \
                        and _alone(sig, start, end, bounds):
                    return self.index[window], window
        return None


def _alone(sig: Sequence[str], start: int, end: int, bounds: Sequence[int]) -> bool:
    """No other number in the sentence of ``sig[start:end]``: "Add 25 and 68, then add 1." or "... and 1" asks
    another question than 25 + 68 (issue 39: the numeric match reads a sentence the same way)."""
    first = max((b for b in bounds if b <= start), default=0)
    last = min((b for b in bounds if b >= end), default=len(sig))
    return not any(is_number(t) for t in (*sig[first:start], *sig[end:last]))
