"""What of a validation result the planner may see: the feedback part's items only (issue 39 item 5).

The evaluation scores the whole validation split once; the error samples (wrong items with their prompts
and golds) and the answer profile a planner reads are read again from that run, keeping only the items of
validation's feedback part (:class:`ftagent.core.holdout.Holdout`). A cached result, or one whose run folder
is gone, is read again the same way; without the run folder nothing item-level is kept (no samples, no
profile), never the samples it was cached with, which another session's split chose.
"""

from __future__ import annotations

from pathlib import Path

from ftagent.core.holdout import Holdout
from ftagent.core.types import EvalResult
from ftagent.tools.opencompass import parse


def feedback_only(result: EvalResult, holdout: Holdout) -> EvalResult:
    """``result`` with its error samples and answer profile from the feedback part's items only."""
    run = Path(result.run_dir) if result.run_dir else None
    if run is None or not run.is_dir():
        return result.model_copy(update={"error_samples": [], "answers": None})

    def keep(dataset: str, item: str) -> bool:
        return holdout.part_of(dataset, item) == "feedback"

    which: str | None = result.split
    if not parse.read_metrics(run, which):  # a one-split run: its datasets carry no "@<split>"
        which = None
    return result.model_copy(update={"error_samples": parse.error_samples(run, split=which, keep=keep),
                                     "answers": parse.prediction_profile(run, which, keep=keep)})
