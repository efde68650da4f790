"""The matches of the contamination scan on one training row (:func:`ftagent.datasets.contamination.scan_rows`
describes the rule; this module is its mechanism).

A row is read as LLaMA-Factory trains it (:func:`ftagent.datasets.trained_text.trained_row`: its system text,
every ``history`` turn, ``instruction`` + ``input``, and every answer: ``output``, ``chosen``, ``rejected``), and
is a hit of an item when

1. *exact*: a short item (fewer than :data:`N_GRAM` tokens) or an item's core (:data:`MIN_CORE_TOKENS` to
   ``N_GRAM - 1`` tokens) is a contiguous run of one trained text's tokens -- unless an operation word right
   before or after the run links it to another number ("What is 12 + 45 + 3?" is another question);
2. *n-gram*: the row's trained texts together hold :data:`MIN_COVERAGE` of a longer item's ``N_GRAM``-grams;
3. *template*: a user turn or the system text asks the item's template with its numbers
   (:mod:`ftagent.datasets.template_scan`);
4. *numbers*: a user turn asks a numeric item's numbers with its gold as an answer's final number, or the
   system text states them side by side (:mod:`ftagent.datasets.numeric_scan`).

:class:`RowScanner` also collects the numeric items the rows *answer* (4., and any trained text, user turns and
answers included, that holds an item's numbers next to its gold) for the input-space check
(:func:`ftagent.datasets.numeric_scan.space_flags`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from ftagent.datasets.numeric_scan import NumericIndex, final_number
from ftagent.datasets.scan_text import (
    Item,
    is_number,
    ngrams,
    normalise,
    segments,
    sentences,
    template_threshold,
)
from ftagent.datasets.template_scan import OPERATIONS, TemplateIndex
from ftagent.datasets.trained_text import TrainedRow, trained_row

PRIMARY = "\x00primary:"
MIN_CORE_TOKENS = 4  # a shorter core is too generic to flag a row by (contamination's module doc)
N_GRAM = 8  # the n of the n-gram test; shorter items must match whole
MIN_COVERAGE = 0.5  # the share of an item's n-grams a row must hold
Hit = tuple[str, float]  # (item id or PRIMARY + item id, coverage)


def _index(items: Mapping[str, Item], n: int):
    """(n-gram → keys, key → n-gram count, exact short items); keys are item ids or primary-field keys.

    N-grams shared by :func:`template_threshold` items or more (a prompt template around every item,
    "Give the correct order of the steps as a list ...") are dropped, unless nothing else is left of an
    item: otherwise an item whose text is half template could never reach ``min_coverage``.
    """
    grams_of: dict[str, set[tuple[str, ...]]] = {}
    exact: dict[str, str] = {}
    df: dict[tuple[str, ...], int] = defaultdict(int)
    for item_id, item in items.items():
        parts = segments(item)
        toks = normalise("\n".join(parts))
        grams = ngrams(toks, n)
        if grams:
            grams_of[item_id] = grams
            for g in grams:
                df[g] += 1
        elif toks:
            exact[" ".join(toks)] = item_id
        primary = ngrams(normalise(parts[0]), n) if len(parts) > 1 else set()
        if primary and len(primary) < len(grams):  # the primary field alone, as its own key
            grams_of[PRIMARY + item_id] = primary
    limit = template_threshold(len(items))
    index: dict[tuple[str, ...], set[str]] = defaultdict(set)
    sizes: dict[str, int] = {}
    for key, grams in grams_of.items():
        kept = {g for g in grams if df[g] < limit} or grams
        sizes[key] = len(kept)
        for g in kept:
            index[g].add(key)
    found_of = {item_id: sentences(item) for item_id, item in items.items()}
    shared: dict[str, int] = defaultdict(int)
    for found in found_of.values():
        for text in set(found):
            shared[text] += 1
    for item_id, found in found_of.items():
        core = " ".join(text for text in found if shared[text] < limit)  # the item without its template
        size = core.count(" ") + 1 if core else 0
        if MIN_CORE_TOKENS <= size < n and len(found) > 1:
            exact.setdefault(core, item_id)
    return index, sizes, exact


def _continues(toks: Sequence[str], start: int, end: int) -> bool:
    """An operation word links ``toks[start:end]`` to another number: the run is part of a longer expression."""
    after = end + 1 < len(toks) and toks[end] in OPERATIONS and is_number(toks[end + 1])
    before = start >= 2 and toks[start - 1] in OPERATIONS and is_number(toks[start - 2])
    return after or before


class _Read:
    """One row's texts, each normalised once (:func:`~ftagent.datasets.scan_text.sentences`; its tokens in order
    are :func:`~ftagent.datasets.scan_text.normalise`'s)."""

    def __init__(self) -> None:
        self._sentences: dict[str, list[str]] = {}

    def sentences(self, text: str) -> list[str]:
        found = self._sentences.get(text)
        if found is None:
            found = self._sentences[text] = sentences(text)
        return found

    def tokens(self, text: str) -> list[str]:
        return [t for s in self.sentences(text) for t in s.split()]

    def final(self, answer: str) -> str | None:
        """:func:`~ftagent.datasets.numeric_scan.final_number`, from the tokens already read when the answer has
        no ``\\boxed{}`` or ``####`` to look into."""
        if "boxed" in answer or "####" in answer:
            return final_number(answer)
        found = [t for t in self.tokens(answer) if is_number(t)]
        return found[-1] if found else None


class RowScanner:
    """Every match of :mod:`ftagent.datasets.contamination`'s rule, built once for a set of items."""

    def __init__(self, items: Mapping[str, Item], answers: Mapping[str, str], *, n: int = N_GRAM,
                 min_coverage: float = MIN_COVERAGE) -> None:
        self.n, self.min_coverage = n, min_coverage
        self.index, self.sizes, self.exact = _index(items, n)
        self.lengths = sorted({key.count(" ") + 1 for key in self.exact})
        self.firsts = {key.split(" ", 1)[0] for key in self.exact}
        self.templates = TemplateIndex(items)
        self.numeric = NumericIndex(items, answers, self.templates.template)
        self.answered: set[str] = set()  # numeric items some row answers (the input-space check)

    def hit(self, row: Any) -> Hit | None:
        """The first item ``row`` holds (see the module docstring), recording what it answers on the way."""
        view = trained_row(row)
        read = _Read()
        numbers = self._numbers(view, read)
        texts = view.texts()
        hit = (next((h for h in (self._exact_hit(read.tokens(t)) for t in texts) if h), None)
               or self._ngram_hit([t for text in texts for t in read.tokens(text)])
               or next((h for h in (self._template_hit(read.sentences(p)) for p in view.prompts()) if h), None))
        return hit or numbers

    def _numbers(self, view: TrainedRow, read: _Read) -> Hit | None:
        """4. of the module docstring; every numeric item the row answers goes to :attr:`answered`."""
        numeric = self.numeric
        if not len(numeric):
            return None
        first: str | None = None
        for turn in view.turns:
            finals = [f for f in (read.final(a) for a in turn.answers) if f is not None]
            for prompt in (turn.prompt, turn.glued):
                if not prompt:
                    continue
                found = numeric.numbers_in(read.sentences(prompt))
                asked = numeric.turn_hits(found, finals)
                first = first or min(asked, default=None)
                self.answered.update(asked | numeric.text_hits(found))  # a stated item: answered, not a hit
            for answer in turn.answers:  # an answer that states an item answers it (not a hit on its own)
                self.answered.update(numeric.text_hits(numeric.numbers_in(read.sentences(answer))))
        if view.system:
            stated = numeric.text_hits(numeric.numbers_in(read.sentences(view.system)))
            first = first or min(stated, default=None)
            self.answered.update(stated)
        return (first, 1.0) if first else None

    def _exact_hit(self, toks: Sequence[str]) -> Hit | None:
        """A short item (or an item's core) as a contiguous run of one text's tokens, not inside a longer
        expression. Containment, not equality: "What is 12 + 34? Put the answer in \\boxed{}." holds the item
        "What is 12 + 34?"."""
        if not self.exact:
            return None
        for start in range(len(toks)):
            if toks[start] not in self.firsts:  # cheap: most positions start no item
                continue
            for size in self.lengths:
                end = start + size
                if end > len(toks):
                    break
                window = " ".join(toks[start:end])
                if window in self.exact and not _continues(toks, start, end):
                    return self.exact[window], 1.0
        return None

    def _ngram_hit(self, toks: list[str]) -> Hit | None:
        if not self.sizes:
            return None
        counts: dict[str, int] = defaultdict(int)
        for g in ngrams(toks, self.n):
            for item_id in self.index.get(g, ()):
                counts[item_id] += 1
        best = max(counts.items(), key=lambda kv: kv[1] / self.sizes[kv[0]], default=None)
        if best and best[1] / self.sizes[best[0]] >= self.min_coverage:
            return best[0], best[1] / self.sizes[best[0]]
        return None

    def _template_hit(self, found: list[str]) -> Hit | None:
        hit = self.templates.hit_sentences(found)
        return (hit[0], 1.0) if hit else None
