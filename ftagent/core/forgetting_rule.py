"""The forgetting guard's rule (``FT_GUARD_BENCHMARKS``), its one owner: how far below the base model a
candidate may fall on a guard benchmark before it is kept from SOTA.

A guard benchmark is scored on a small seeded sample (``FT_GUARD_SAMPLE`` items per sub-dataset) for the
base model and for each candidate that would otherwise become SOTA (:mod:`ftagent.finetune.forgetting_guard`).
The difference candidate − base is paired item by item with the same bootstrap as every other score
(:func:`ftagent.core.stats.paired_bootstrap`), and:

* with an interval: the candidate is **blocked** when the upper bound of its gain (in the metric's
  direction) is below ``-FT_GUARD_MAX_DROP`` points — the whole 95 % interval says it lost more than
  the allowed drop. On 50 items a 0/1 score's interval is about ±10-15 points wide, so the guard
  catches a collapse (80 % → 20 %), not a 3-point wobble it could not tell from noise;
* without one (a metric that is not a mean over items, items that do not pair): the point drop must
  exceed ``FT_GUARD_MAX_DROP``, and the text says so;
* a guard evaluation that failed (candidate or base) judges nothing: recorded, never blocking (the
  candidate already passed the target benchmark's own evaluation; the failure is shown).
"""

from __future__ import annotations

from pydantic import BaseModel

from ftagent.core.stats import Difference


class GuardResult(BaseModel):
    """One guard benchmark's verdict on one candidate."""

    benchmark: str
    core_metric: str = ""
    base_score: float | None = None
    candidate_score: float | None = None
    difference: Difference | None = None  # candidate − base, split "guard"
    blocked: bool = False
    text: str = ""
    error: str | None = None  # the guard evaluation failed: nothing judged


def judge_drop(benchmark: str, diff: Difference, *, max_drop: float, direction: str = "max",
               core_metric: str = "") -> GuardResult:
    """The verdict of one guard difference (see the module docstring)."""
    bar = f"-FT_GUARD_MAX_DROP = {-max_drop:g}" if max_drop else "0"
    head = f"{benchmark} {core_metric}".strip() + f" vs the base model: {diff.text()}"
    bounds = diff.gain_bounds(direction)
    if bounds is not None:
        blocked = bounds[1] < -max_drop
        verdict = (f"forgot: the interval's upper bound is below {bar}" if blocked
                   else f"no drop beyond {max_drop:g} points shown")
    elif diff.diff is not None:
        gain = diff.diff if direction != "min" else -diff.diff
        blocked = gain < -max_drop
        verdict = (f"forgot: the drop exceeds {max_drop:g} points (no interval, the point difference decides)"
                   if blocked else f"no drop beyond {max_drop:g} points (no interval, the point difference decides)")
    else:
        return GuardResult(benchmark=benchmark, core_metric=core_metric, difference=diff,
                           text=f"{head}: not judged (no score)")
    return GuardResult(benchmark=benchmark, core_metric=core_metric, difference=diff, blocked=blocked,
                       text=f"{head}: {verdict}")


def blocking(results: list[GuardResult]) -> list[GuardResult]:
    """The guard results that keep a candidate from SOTA."""
    return [r for r in results if r.blocked]
