"""Validation's feedback part and selection part (issue 39 item 5).

The planner sees validation items: the brief's example, the wrong items of each loop's feedback. Items it
sees can come back in its training data, reworded past any scan (issue 39: 400 rows of "What's a + b?"
passed). **Rule: validation is split, per item, into a feedback part, whose items may appear in prompts,
feedback and logs the planner reads, and a selection part, which no prompt, no log shown to the planner and
no file in a sandbox ever holds, and which alone decides the SOTA with its interval.**

How, as a user of OpenCompass expects it: **one** OpenCompass run over the whole validation split, scored
per item (:class:`~ftagent.core.stats.ItemScores`), then split by item id -- no second evaluation. The
split is drawn once per session (:func:`split_holdout`), seeded (``FT_HOLDOUT_SEED``), recorded in the
session's scenario and trace (a resume uses the same parts), per dataset (sub-dataset): a seeded shuffle of
its item ids, the first ``round(share × n)`` to selection (``FT_SELECTION_SHARE``, default 0.7), the rest to
feedback. A dataset of one item gives it to selection. The default seed is a constant, so every session of
one benchmark holds out the same items: an item one session showed its planner is never another's
selection item.

Sizes follow the benchmark: 100 validation items give 70 / 30; AIME's 15 give 10 / 5. Below
:data:`MIN_SELECTION_ITEMS` the selection part's interval is too wide to mean much (one item moves a score
by more than 3 points), and :meth:`Holdout.size_note` says so in the report and the brief.

What follows: the baseline is scored once and read by both parts; a loop's selection interval (vs the
baseline or the SOTA) decides (:mod:`ftagent.core.sota`); the forgetting guard runs only for a candidate
the selection part makes SOTA; the test split and the final evaluation are not split (the planner never
sees them). A core metric that is not a mean over items (a corpus F1, a G-Pass@k) cannot be split by item:
then the whole validation split decides by the delta rule and the verdict says so, while the planner still
sees feedback items only.
"""

from __future__ import annotations

import random
from typing import Literal

from pydantic import BaseModel, Field

from ftagent.core.stats import ItemScores

Part = Literal["feedback", "selection"]
SELECTION_SHARE = 0.7
HOLDOUT_SEED = 39005
MIN_SELECTION_ITEMS = 30


class Holdout(BaseModel):
    """The session's split of its validation items into the two parts, by dataset and item id."""

    seed: int
    share: float
    feedback: dict[str, list[str]] = Field(default_factory=dict)  # dataset (OpenCompass abbr) -> item ids
    selection: dict[str, list[str]] = Field(default_factory=dict)
    files: dict[str, str] = Field(default_factory=dict)  # dataset -> its validation file, relative to the items

    def size(self, part: Part) -> int:
        return sum(len(ids) for ids in getattr(self, part).values())

    def part_of(self, dataset: str, item: str) -> Part | None:
        """Which part ``item`` of ``dataset`` is in (None: not a validation item of this split)."""
        if item in self.selection.get(dataset, ()):
            return "selection"
        if item in self.feedback.get(dataset, ()):
            return "feedback"
        return None

    def restrict(self, record: ItemScores, part: Part) -> ItemScores:
        """``record`` with only ``part``'s items (a record without per-item scores stays as it is)."""
        keep = getattr(self, part)
        if record.no_interval or not record.items:
            return record
        items = {name: {i: v for i, v in values.items() if i in set(keep.get(name, ()))}
                 for name, values in record.items.items()}
        return record.model_copy(update={"items": {k: v for k, v in items.items() if v}, "split": part})

    def size_note(self) -> str:
        """A line when the selection part is too small for its interval to mean much ('' otherwise)."""
        n = self.size("selection")
        if n >= MIN_SELECTION_ITEMS:
            return ""
        return (f"the selection part holds {n} items (fewer than {MIN_SELECTION_ITEMS}): one item moves its score "
                f"by {100 / max(1, n):.1f} points, so its interval is wide and a real gain rarely shows as significant")

    def line(self) -> str:
        """``validation: 100 items, 30 feedback (may be shown) + 70 selection (never shown, decides)``."""
        f, s = self.size("feedback"), self.size("selection")
        return (f"validation: {f + s} items, {f} in the feedback part (may be shown to the planner) and {s} in the "
                f"selection part (never shown; it alone decides the best model), seed {self.seed}")


def split_holdout(sizes: dict[str, int], *, seed: int = HOLDOUT_SEED, share: float = SELECTION_SHARE,
                  files: dict[str, str] | None = None) -> Holdout:
    """The split of datasets of ``sizes`` (dataset -> validation items; ids are ``"0"`` .. ``"n-1"``, the row
    index OpenCompass reports as ``example_abbr``'s suffix)."""
    out = Holdout(seed=seed, share=share, files=dict(files or {}))
    for name, n in sorted(sizes.items()):
        ids = [str(i) for i in range(n)]
        random.Random(f"{seed}:{name}").shuffle(ids)
        k = n if n < 2 else min(n - 1, max(1, round(share * n)))
        out.selection[name] = sorted(ids[:k], key=int)
        out.feedback[name] = sorted(ids[k:], key=int)
    return out


def part_score(record: ItemScores | None, holdout: Holdout, part: Part) -> float | None:
    """``part``'s score recomputed from the per-item record (None: no record, or not a mean over items)."""
    if record is None or record.no_interval or not record.items:
        return None
    return holdout.restrict(record, part).score()


class PartResult(BaseModel):
    """One part's score of one evaluation: recomputed from the per-item record, and that record's file."""

    score: float | None = None
    items: str | None = None  # the part's ItemScores JSON (beside the whole split's record)
    count: int = 0


PARTS: tuple[Part, Part] = ("selection", "feedback")


def split_record(items_file: str | None, holdout: Holdout) -> dict[str, PartResult]:
    """Each part's :class:`PartResult` of the validation record at ``items_file``, the parts' records written
    beside it (``<name>.<part>-<seed>-<share>.json``: sessions with other splits never share one); ``{}``
    when the record is missing or its metric is not a mean over items (it cannot be split by item)."""
    from pathlib import Path

    from ftagent.core.stats import load_items

    record = load_items(items_file)
    if record is None or record.no_interval or not record.items or items_file is None:
        return {}
    out: dict[str, PartResult] = {}
    base = Path(items_file)
    for part in PARTS:
        mine = holdout.restrict(record, part)
        path = base.with_name(f"{base.stem}.{part}-{holdout.seed}-{holdout.share:g}.json")
        out[part] = PartResult(score=mine.score(), items=str(mine.save(path)), count=mine.count)
    return out
