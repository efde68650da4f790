"""Contamination scan: do generated training rows contain benchmark items (validation or test)?

Text is normalised before tokenising, the same way on both sides (see :func:`normalise`): NFKC, zero-width
characters and soft hyphens removed, option labels (``A.``, ``(B)``, ``C)``, ``D、``) and list
enumerators (``1.``, ``Step 2:`` at a line start) dropped, thousands separators and in-word apostrophes
removed, LaTeX layout commands (``\\left``, ``\\dfrac`` …) unified, lower case, word tokens (CJK
characters count as one token each; whitespace and punctuation never matter).

A benchmark item is either one text or a sequence of field texts (the first is the item's *primary*
field: question, prompt). An item with at least ``n`` tokens is *hit* by a training row when the row
contains at least ``min_coverage`` of the item's n-grams -- of the whole item, or of its primary field
alone (a training row that copies an MBPP question without its test asserts, or a multiple-choice stem
with other options, still holds the item). N-grams that most items share (a prompt template wrapped
around every item, see :func:`template_threshold`) are not item content and are left out. Shorter items (e.g. "What is 12 + 45?") are hit only by an
exact match of the normalised text inside a row field. A longer item is also hit by its *core* -- its
sentences that are not template (a sentence found in :func:`template_threshold` items or more is), e.g.
"what is 28 times 3" of "What is 28 times 3? Put the final answer in \\boxed{}." -- found the same way
inside a row field (issue 35: a row holding the bare question, without the template, passed the
n-gram test because it has fewer than ``n`` tokens).
A row is every text LLaMA-Factory trains on of it (:mod:`ftagent.datasets.trained_text`: system, history turns,
instruction + input, output or chosen and rejected), and the matches are :mod:`ftagent.datasets.row_scan`'s:
besides the exact, core and n-gram matches above, the template match (:mod:`ftagent.datasets.template_scan`) and
the numeric match, an item whose answer is a number asked with its numbers in any wording
(:mod:`ftagent.datasets.numeric_scan`). An item's run is not a hit as part of a longer expression: "What is 25 + 68
- 3?" is another question than "What is 25 + 68?".
Rows hitting any item are flagged; more than ``max_flagged`` flagged rows raise
:class:`~ftagent.core.errors.StepError` (``ErrorType.DATA``), and so does data that answers a large share of a
small templated input space (:func:`ftagent.datasets.numeric_scan.space_flags`).

The exact and core matches compare whole tokens, never characters: "What is 128 times 3?" does not hold
the item "28 times 3?" (tokens ``128`` ≠ ``28``), and "What is 28 times 3? Explain." does. The
trade-off: a core of :data:`MIN_CORE_TOKENS` to ``n - 1`` tokens is specific enough that a row holding
it contiguously is asking that item (a false positive needs the same words and numbers in the same
order, e.g. a training row that happens to ask the same question: which *is* the item); a shorter core
("what is 7") would flag ordinary rows, so it is not used (such items still match whole), and a longer
one is left to the n-gram coverage test.

The error names benchmark items only by id and split, never by text, because the message is shown to
the planner and the test split must stay hidden from it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, Field

from ftagent.core.errors import ErrorType, StepError
from ftagent.datasets.numeric_scan import COVERAGE_FLAG, MAX_ENUMERABLE, MIN_DIGITS, SpaceFlag, space_flags
from ftagent.datasets.row_scan import MIN_CORE_TOKENS, MIN_COVERAGE, N_GRAM, PRIMARY, RowScanner
from ftagent.datasets.scan_text import (  # noqa: F401 - re-exported: the scan's text, one owner
    STOPWORDS,
    TEMPLATE_SHARE,
    Item,
    clean,
    ngrams,
    normalise,
    segments,
    sentences,
    template_threshold,
)
from ftagent.datasets.trained_text import trained_row

_segments, _sentences = segments, sentences

NO_ANSWERS: Mapping[str, str] = MappingProxyType({})


class Overlap(BaseModel):
    """One flagged training row (or system text)."""

    row_index: int
    item_id: str
    coverage: float
    row_excerpt: str


class ContaminationReport(BaseModel):
    """Result of :func:`scan_rows`."""

    rows_checked: int
    items_checked: int
    n: int
    flagged: list[Overlap] = Field(default_factory=list)
    spaces: list[SpaceFlag] = Field(default_factory=list)  # templated input spaces the rows answer a large share of

    @property
    def flagged_rows(self) -> int:
        """How many distinct training rows hit a benchmark item."""
        return len({o.row_index for o in self.flagged})


ANSWER_MIN_TOKENS = 8  # shorter gold answers ("118", "Yes") are common words, not a copied item
ANSWER_COVERAGE = 0.8  # the share of a long gold answer's n-grams an output must hold to copy it


def _excerpt(row: Any) -> str:
    return "\n".join(trained_row(row).texts()).strip()[:160]


def scan_rows(rows: Sequence[Any], items: Mapping[str, Item], *, answers: Mapping[str, str] = NO_ANSWERS,
              n: int = N_GRAM, min_coverage: float = MIN_COVERAGE) -> ContaminationReport:
    """Compare Alpaca ``rows`` (every text LLaMA-Factory trains: :mod:`ftagent.datasets.trained_text`) with
    benchmark ``items`` (item id → text, or its field texts). ``answers``: the items' gold answers (item id →
    text) for the numeric match and the input-space check (:mod:`ftagent.datasets.numeric_scan`); without them
    only the text matches run."""
    scanner = RowScanner(items, answers, n=n, min_coverage=min_coverage)
    report = ContaminationReport(rows_checked=len(rows), items_checked=len(items), n=n)
    for i, row in enumerate(rows):
        hit = scanner.hit(row)
        if hit:
            item_id, cov = hit
            report.flagged.append(Overlap(row_index=i, item_id=item_id.removeprefix(PRIMARY),
                                          coverage=round(cov, 3), row_excerpt=_excerpt(row)))
    report.spaces = space_flags(scanner.numeric, scanner.answered)
    return report


def scan_system_texts(texts: Sequence[str], items: Mapping[str, Item], answers: Mapping[str, str]) -> list[Overlap]:
    """The config's text that reaches every prompt (train.yaml's ``default_system``: LLaMA-Factory's template
    renders it in training and, for a template that writes its Jinja, in evaluation) scanned like a row's
    ``system``; ``row_index`` is the text's position in ``texts``."""
    rows = [{"system": t} for t in texts if t]
    return scan_rows(rows, items, answers=answers).flagged if rows else []


def check_contamination(rows: Sequence[Any], items: Mapping[str, Item], *,
                        answers: Mapping[str, str] = NO_ANSWERS, n: int = N_GRAM,
                        min_coverage: float = MIN_COVERAGE, max_flagged: int = 0,
                        examples: int = 3) -> ContaminationReport:
    """Scan and raise when more than ``max_flagged`` rows overlap benchmark items, or the rows answer a large
    share of a templated input space (:func:`ftagent.datasets.numeric_scan.space_flags`).

    Raises:
        StepError: ``error_type=ErrorType.DATA``, listing up to ``examples`` flagged rows (row index,
            benchmark item id, coverage) and the input spaces. No text is quoted: an overlapping row *is*
            benchmark text.
    """
    report = scan_rows(rows, items, answers=answers, n=n, min_coverage=min_coverage)
    if report.flagged_rows > max_flagged or report.spaces:
        shown = "\n".join([f"- row {o.row_index} overlaps benchmark item {o.item_id} "
                           f"({o.coverage:.0%} of its {n}-grams)" for o in report.flagged[:examples]]
                          + [f"- {flag.words()}" for flag in report.spaces])
        what = (f"{report.flagged_rows} of {report.rows_checked} training rows contain benchmark items"
                if report.flagged else f"the {report.rows_checked} training rows answer most of the benchmark's "
                                       "input space")
        raise StepError(
            what,
            error_type=ErrorType.DATA,
            log_tail=shown,
            suggestion="drop rows that copy benchmark questions; never build training data from "
                       "benchmark files" + ("; generate numbers outside the benchmark's ranges"
                                            if report.spaces else ""),
            details={"flagged_rows": report.flagged_rows,
                     "examples": [o.model_dump(exclude={"row_excerpt"}) for o in report.flagged[:examples]],
                     "input_spaces": [flag.words() for flag in report.spaces]},
        )
    return report


def rule_words(example: str = "", question: str = "") -> str:
    """The scan's rule as the planner reads it (the brief's Training data rules; issue 35: "never copy or
    paraphrase benchmark items" did not say what is compared, so a planner could not avoid it; issue 39: nor
    that a reworded item is one). Rendered from this module's constants: change a threshold here and the
    prompt follows. ``example``: the session's own benchmark item with hits and non-hits the scan itself
    confirmed (:func:`ftagent.datasets.template_scan.rule_example`); ``question``: that item, for the
    content-word example."""
    from ftagent.datasets.template_scan import read_as_words

    pct = f"{TEMPLATE_SHARE:.0%}"
    return (
        "Contamination check, exactly: every row of data.json (debug and full run) is compared with the question "
        "fields and gold answers of every validation and test item (your script cannot read them; the check runs outside it). "
        "Both sides are normalised first: Unicode NFKC, invisible and joiner characters removed, accents removed, "
        "letters that look Latin (Cyrillic, Greek) read as Latin, digits of any script as 0-9, spelled-out "
        "numbers as digits (`forty-five` = `45`), contractions expanded (`What's` = `What is`), `+ - x * / =` "
        "read as `plus minus times over equals`, lower case, punctuation and spacing ignored, option "
        "labels (`A.`, `(B)`) and list numbers dropped, thousands separators removed; then they are compared as "
        "whole word tokens (`What is 128 times 3?` does not hold `28 times 3?`; `What is 28 times 3? Explain.` "
        "does). Every text LLaMA-Factory trains on is read: instruction, input, output, chosen, rejected, system "
        "and every history turn (and train.yaml's default_system, checked like a row's system when validation "
        f"passes). A row holds an item when (1) an item of fewer than {N_GRAM} tokens appears as a contiguous run "
        "of tokens inside one of its texts, not as part of a longer expression (`What is 25 + 68 - 3?` is another "
        "question than `What is 25 + 68?`); (2) an item's core (its sentences without the prompt "
        f"template, i.e. sentences found in {pct} of the items or more) of {MIN_CORE_TOKENS}-{N_GRAM - 1} tokens "
        f"appears contiguously inside one of those texts; (3) the row holds at least {MIN_COVERAGE:.0%} of a "
        f"longer item's {N_GRAM}-token runs (runs shared by {pct} of the items or more do not count); (4) a user "
        "turn (instruction + input, a history question) or the system text asks the item again: the same template "
        "and the same numbers, no other number in that sentence -- question words and verbs (`what is`, `calculate`, `compute`, `find`, `equals`) "
        f"ignored, {read_as_words()}, and the two numbers of a `plus` or `times` in either order; or (5) the item's "
        f"answer is a number ({MIN_DIGITS}+ digits in its numbers and answer together) and a user turn holds "
        "exactly the item's numbers in the sentences they are in, in any words, order or language (a number is "
        "read whole: `-25` is not `25`, `68.25` is not `68`, `068` is `68`), while an answer trained on that turn "
        "ends with the item's answer (its last number, or what `\\boxed{}` or `####` holds); a system text that "
        "holds an item's numbers next to its answer states it. Other numbers, another operation, or the "
        "benchmark's own sentence with numbers outside the items' range are not hits. "
        + (f"{example} " if example else "")
        + "One such row fails the data step (a DATA error naming row numbers and item ids, never the text): no "
        "row is dropped for you, so filter in process_data.py. The data fails as well when the benchmark's "
        f"questions share a template whose input space is small (at most {MAX_ENUMERABLE:,} questions: the ranges "
        f"of its numbers multiplied) and its texts, worked answers included, answer {COVERAGE_FLAG:.0%} or more of "
        "that template's items: it then holds as large a share of the hidden selection part and test split. After "
        "training the integrity guard also checks "
        f"paraphrases (a row whose user turn or system text has a content-word overlap, Jaccard, of {FUZZY_JACCARD:.0%} "
        f"or more with an item's question, for items of {FUZZY_MIN_TOKENS}+ content words; "
        f"{content_words_rule(question)}) "
        "and answers that copy "
        f"{ANSWER_COVERAGE:.0%} of a gold answer of {ANSWER_MIN_TOKENS}+ words: such a result is not eligible "
        "as best. So a script that generates questions in the benchmark's own form over its own value range "
        "will hit items it cannot see, and rewording the items you were shown does not hide them: vary the "
        "numbers' range or the task itself (raw rows that already leave the benchmark's items out, as a "
        "dataset's notes may say, are fine, and stay fine rewritten in the benchmark's wording: the same question "
        "with the same numbers is the same template to check (4)). The benchmark's own template -- "
        f"its closing instruction sentence and answer format, found in {pct} of the items or more -- is not item "
        "content and may stay in every row.")


def items_from_records(records: Iterable[Mapping], fields: Iterable[str], prefix: str = "") -> dict[str, str]:
    """Build the ``items`` mapping from benchmark records (text = the given fields joined)."""
    fields = list(fields)
    out = {}
    for i, rec in enumerate(records):
        item_id = f"{prefix}{rec.get('id', i)}"
        out[item_id] = "\n".join(str(rec.get(f) or "") for f in fields)
    return out


# -- fuzzy: paraphrased items (issue 31 item 5, the integrity guard) ---------------------------------------
FUZZY_MIN_TOKENS = 6  # items with fewer distinct content words are left to the exact scan (too generic)
FUZZY_JACCARD = 0.6


def content_tokens(text: str) -> set[str]:
    """The distinct words of ``text`` (:func:`normalise`) without :data:`STOPWORDS`."""
    return {t for t in normalise(text) if t not in STOPWORDS}


def content_words_rule(question: str = "") -> str:
    """What a content word is, in words, for :func:`rule_words` (issue 35: a played planner could not tell
    whether numbers count). The example -- ``question``, the session's own benchmark item (issue 39: times3's
    prompts carried plus11's), else a neutral one -- is tokenised by :func:`content_tokens` itself, so it stays
    true."""
    example = " ".join((question or "How many legs do 171 spiders have?").split())[:160]
    words = ", ".join(sorted(content_tokens(example), key=lambda t: (not t.isdigit(), len(t), t)))
    shown = ", ".join(f"`{w}`" for w in ("what", "is", "the", "answer") if w in STOPWORDS)
    return (f"content words are the distinct word tokens above, numbers included, each whole number one word "
            f"(`{example}` has {{{words}}}; `171` and `71` differ), less {len(STOPWORDS)} function words "
            f"({shown}, ...) and less the words found in {TEMPLATE_SHARE:.0%} of the items or more (the benchmark's "
            "template: when every item shares all its words but one number, only that number is left, fewer than "
            f"{FUZZY_MIN_TOKENS} words, so only checks (1)-(5) above apply to those items)")


def fuzzy_scan(rows: Sequence[Any], items: Mapping[str, Item], *, threshold: float = FUZZY_JACCARD,
               min_tokens: int = FUZZY_MIN_TOKENS) -> ContaminationReport:
    """Rows with a user turn (``instruction`` + ``input``, a ``history`` question) or a ``system`` text that is a
    paraphrase of an item's primary field (:meth:`~ftagent.datasets.trained_text.TrainedRow.prompts`).

    The n-gram scan (:func:`scan_rows`) needs runs of ``n`` words in order; a paraphrase reorders clauses
    and swaps words. Here an item's primary field and a row's question are compared as sets of content
    words (normalised, :data:`STOPWORDS` and template words shared by :func:`template_threshold` items
    removed): a Jaccard similarity of at least ``threshold`` flags the row. Items with fewer than
    ``min_tokens`` content words are skipped ("What is 85 + 33?" is {85, 33}: the exact scan's job; honest
    rows of the same form must not match). ``coverage`` is the Jaccard similarity.
    """
    sets = {item_id: content_tokens(_segments(item)[0]) for item_id, item in items.items()}
    df: dict[str, int] = defaultdict(int)
    for toks in sets.values():
        for t in toks:
            df[t] += 1
    limit = template_threshold(len(items))
    sets = {k: {t for t in v if df[t] < limit} for k, v in sets.items()}
    sets = {k: v for k, v in sets.items() if len(v) >= min_tokens}
    index: dict[str, list[str]] = defaultdict(list)
    for item_id, toks in sets.items():
        for t in toks:
            index[t].append(item_id)
    report = ContaminationReport(rows_checked=len(rows), items_checked=len(sets), n=0)
    for i, row in enumerate(rows):
        for question in trained_row(row).prompts():  # every user turn (history too) and the system text
            mine = {t for t in content_tokens(question) if df.get(t, 0) < limit}
            best, score = _closest(mine, index, sets)
            if best is not None and score >= threshold:
                report.flagged.append(Overlap(row_index=i, item_id=best, coverage=round(score, 3),
                                              row_excerpt=question.strip()[:160]))
                break
    return report


def _closest(mine: set[str], index: Mapping[str, list[str]], sets: Mapping[str, set[str]]) -> tuple[str | None, float]:
    """The item whose content words are closest to ``mine`` (Jaccard), and the similarity."""
    shared: dict[str, int] = defaultdict(int)
    for t in mine:
        for item_id in index.get(t, ()):
            shared[item_id] += 1
    best, score = None, 0.0
    for item_id, common in shared.items():
        jaccard = common / (len(mine) + len(sets[item_id]) - common)
        if jaccard > score:
            best, score = item_id, jaccard
    return best, score
