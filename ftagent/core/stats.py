"""Per-item scores of one evaluation, and paired bootstrap intervals for the difference of two.

A split holds at most 100 items per sub-dataset (AIME: 15), so one item moves a score by 1 to 6.7
points. Every evaluation therefore keeps its per-item scores (:class:`ItemScores`, a JSON file next to
OpenCompass's results), and every difference the session reports (candidate − baseline, candidate −
SOTA, on validation and test) comes with a paired bootstrap interval (:func:`paired_bootstrap`):

* paired: the two models are compared on the same items, matched by item id (never by position);
* stratified like the score: the core score is the plain mean over sub-datasets of each one's mean over
  its items (:func:`ftagent.tools.opencompass.parse.core_score`), so each resample draws items with
  replacement within each sub-dataset and averages the sub-datasets the same way;
* seeded (:data:`SEED`), :data:`RESAMPLES` resamples, percentile interval at :data:`LEVEL`.

An evaluation whose core metric is not a mean over its items (a corpus-level F1 or BLEU, a G-Pass@k)
has ``no_interval`` set, and any difference involving it says "no interval" with the reason rather
than inventing one. Pure Python (no numpy): the core layer has no numeric dependency.
"""

from __future__ import annotations

import json
import os
import random
import threading
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

RESAMPLES = 2000
LEVEL = 0.95
SEED = 20261205
ITEMS_SUFFIX = ".items.json"


class ItemScores(BaseModel):
    """One model's per-item scores on one split: ``{dataset: {item id: value in [0, 1]}}``.

    ``value`` is the item's correctness (0/1), its mean over the runs (``FT_BENCHMARK_NUM_RUNS``), or
    a per-item score in [0, 1]. The split's score is ``scale`` × the mean over datasets of each
    dataset's mean value, when ``no_interval`` is None (checked against the reported metrics when the
    record is built).
    """

    benchmark: str = ""
    split: str = ""
    core_metric: str = ""
    scale: float = 100.0  # score units per unit of item value (100: the metric is a percentage)
    items: dict[str, dict[str, float]] = Field(default_factory=dict)
    no_interval: str | None = None  # why the score is not a mean over these items (None: it is)

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.items.values())

    def score(self) -> float | None:
        """The split's score recomputed from the items (None without items)."""
        means = [sum(v.values()) / len(v) for v in self.items.values() if v]
        return self.scale * sum(means) / len(means) if means else None

    def save(self, path: Path | str) -> Path:
        """Write the record as JSON (atomically: the eval cache folder is shared)."""
        path = Path(path)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(self.model_dump_json(indent=1), encoding="utf-8")
        tmp.replace(path)
        return path


def load_items(path: str | Path | None) -> ItemScores | None:
    """The record at ``path``; None when there is none or it cannot be read (then: no interval)."""
    if not path:
        return None
    try:
        return ItemScores.model_validate_json(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


class Difference(BaseModel):
    """``candidate − reference`` on one split, with its paired bootstrap interval when there is one."""

    against: str  # "baseline" | "SOTA"
    split: str  # "validation" | "test"
    reference: str = ""  # who the reference is, in words: "the baseline", "loop 2"
    diff: float | None = None  # score points, candidate − reference
    low: float | None = None
    high: float | None = None
    items: int = 0  # paired items
    resamples: int = 0
    level: float = LEVEL
    seed: int = SEED
    no_interval: str | None = None  # why low/high are missing

    @property
    def has_interval(self) -> bool:
        return self.low is not None and self.high is not None

    def gain_bounds(self, direction: str = "max") -> tuple[float, float] | None:
        """(lower, upper) bound of the improvement in the metric's direction (None: no interval)."""
        if self.low is None or self.high is None:
            return None
        return (self.low, self.high) if direction != "min" else (-self.high, -self.low)

    def text(self) -> str:
        """``+3.0 [-4.0, +10.0] on 100 items``, or ``+3.0 (no interval: why)``."""
        diff = "?" if self.diff is None else signed(self.diff)
        if self.low is not None and self.high is not None:  # has_interval, spelled out for the type checker
            return f"{diff} [{signed(self.low)}, {signed(self.high)}] on {self.items} items"
        return f"{diff} (no interval: {self.no_interval or 'unknown'})"


def signed(x: float) -> str:
    """``+3.0``, ``-4.0``, ``+0.0123``: a difference with its sign."""
    return f"{x:+.1f}" if abs(x) >= 1 or x == 0 else f"{x:+.3g}"


def _quantile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated quantile of sorted values (numpy's default rule)."""
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def pair(candidate: ItemScores, reference: ItemScores) -> tuple[dict[str, list[float]], str | None]:
    """Per dataset, the paired differences ``candidate − reference`` of the same item ids; or the
    reason they cannot be paired (other datasets, other items, a score that is not a mean)."""
    for who, rec in (("candidate", candidate), ("reference", reference)):
        if rec.no_interval:
            return {}, f"{who}: {rec.no_interval}"
        if not rec.items or not any(rec.items.values()):
            return {}, f"{who}: no per-item scores"
    if candidate.scale != reference.scale:
        return {}, "the two scores are on different scales"
    if set(candidate.items) != set(reference.items):
        return {}, "the two evaluations scored different datasets"
    out: dict[str, list[float]] = {}
    for name, cand in candidate.items.items():
        ref = reference.items[name]
        if set(cand) != set(ref):
            return {}, f"the two evaluations scored different items of {name}"
        out[name] = [cand[i] - ref[i] for i in sorted(cand)]
    return out, None


def bootstrap_distribution(candidate: ItemScores, reference: ItemScores, *, resamples: int = RESAMPLES,
                           seed: int = SEED) -> tuple[float, list[float], int] | str:
    """The sorted bootstrap distribution of ``candidate − reference`` (score points): ``(point difference,
    the resampled differences in ascending order, paired items)``, or the reason there is none.

    Paired by item id and stratified like the score (see the module docstring); seeded, so the same two
    records always give the same distribution (:func:`paired_bootstrap` reads its interval from it, the
    SOTA rule's family correction reads other tails of it: :mod:`ftagent.core.sota_family`).
    """
    diffs, why = pair(candidate, reference)
    if why is not None:
        return why
    scale = candidate.scale
    groups = [d for d in diffs.values() if d]
    point = scale * sum(sum(d) / len(d) for d in groups) / len(groups)
    rng = random.Random(seed)
    stats = []
    for _ in range(resamples):
        total = 0.0
        for d in groups:
            total += sum(rng.choices(d, k=len(d))) / len(d)
        stats.append(scale * total / len(groups))
    stats.sort()
    return point, stats, sum(len(d) for d in groups)


def quantile(sorted_values: list[float], q: float) -> float:
    """The ``q`` quantile of ascending values, linearly interpolated (numpy's default rule)."""
    return _quantile(sorted_values, q)


def paired_bootstrap(candidate: ItemScores | None, reference: ItemScores | None, *, against: str, split: str,
                     reference_name: str = "", diff: float | None = None, resamples: int = RESAMPLES,
                     seed: int = SEED, level: float = LEVEL) -> Difference:
    """The paired, stratified bootstrap interval of ``candidate − reference`` (see the module docstring).

    ``diff`` is the difference of the reported scores, used when no interval can be computed; with
    one, the difference recomputed from the items is reported (it equals the reported one: the record
    was checked against the metrics when it was built).
    """
    base = Difference(against=against, split=split, reference=reference_name, diff=diff, resamples=0,
                      level=level, seed=seed)
    if candidate is None or reference is None:
        return base.model_copy(update={"no_interval": "per-item scores missing"})
    found = bootstrap_distribution(candidate, reference, resamples=resamples, seed=seed)
    if isinstance(found, str):
        return base.model_copy(update={"no_interval": found})
    point, stats, items = found
    tail = (1.0 - level) / 2
    return base.model_copy(update={
        "diff": round(point, 6), "low": round(_quantile(stats, tail), 6), "high": round(_quantile(stats, 1 - tail), 6),
        "items": items, "resamples": resamples})


def short(d: Difference) -> str:
    """``+3.0 [-4.0, +10.0] vs SOTA, 100 items`` or ``+3.0 vs SOTA, no interval``."""
    diff = "?" if d.diff is None else signed(d.diff)
    if d.low is not None and d.high is not None:  # has_interval, spelled out for the type checker
        return f"{diff} [{signed(d.low)}, {signed(d.high)}] vs {d.against}, {d.items} items"
    return f"{diff} vs {d.against}, no interval"


def interval_line(score: float | None, differences: list[Difference] | list[dict[str, Any]], split: str) -> str:
    """``validation 62.0 (+3.0 [-4.0, +10.0] vs SOTA, 100 items; +32.0 [...] vs baseline, 100 items)``:
    a score with its differences on ``split`` (the SOTA first); the score alone without any."""
    diffs = [d if isinstance(d, Difference) else Difference.model_validate(d) for d in differences]
    mine = sorted((d for d in diffs if d.split == split), key=lambda d: d.against != "SOTA")
    value = "none" if score is None else f"{score:.4g}"
    return f"{split} {value}" + (f" ({'; '.join(short(d) for d in mine)})" if mine else "")


def as_json(differences: list[Difference]) -> list[dict[str, Any]]:
    """Differences as plain JSON (events, report.json)."""
    return [json.loads(d.model_dump_json()) for d in differences]
