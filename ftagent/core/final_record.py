"""The final evaluation of a session (issue 31 item 3): the best model and the base model on the whole
benchmark outside validation (``FT_FINAL_EVAL=full``), or on the test split (``split``).

The test and validation splits hold at most 100 items per sub-dataset, so their scores cannot be set
beside a leaderboard's full-set number; the final score can. It is written once, at the end of the
session, to ``SESSION_DIR/final_eval.json`` (:data:`FINAL_FILE`) by :mod:`ftagent.finetune.final_evaluation`, and
read by the report and the model card, which say how many items each number is over.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from ftagent.core.stats import Difference

FINAL_FILE = "final_eval.json"
FinalMode = Literal["full", "split", "none"]


class FinalEvaluation(BaseModel):
    """The base and the best model on the final item set, with the paired interval of the difference."""

    mode: FinalMode
    split: str  # the items scored: "full" (every item outside validation) or "test"
    items: int = 0  # items each number is over
    test_items: int = 0  # the test split's, for the comparison
    note: str = ""  # e.g. "full equals test here: ..."
    benchmark: str = ""
    core_metric: str = "score"
    base_score: float | None = None
    best_loop: int | None = None  # None: no loop beat the baseline (the best model is the base)
    best_score: float | None = None
    difference: Difference | None = None  # best − base, paired on the same items
    base_items: str | None = None  # the per-item score files (ftagent.core.stats.ItemScores)
    best_items: str | None = None

    def what(self) -> str:
        """``full (400 items: every item outside validation)`` / ``test (100 items)``."""
        if self.split == "full":
            return f"full ({self.items} items: every item outside validation)"
        return f"{self.split} ({self.items} items)"

    def line(self) -> str:
        """One line for the console, the report and the card."""
        base = "none" if self.base_score is None else f"{self.base_score:.4g}"
        best = "none" if self.best_score is None else f"{self.best_score:.4g}"
        who = f"best (loop {self.best_loop})" if self.best_loop is not None else "best (the base model: no loop beat it)"
        text = f"final evaluation on {self.what()}: base {base}, {who} {best}"
        if self.difference is not None and self.best_loop is not None:
            text += f", difference {self.difference.text()}"
        return text + (f" — {self.note}" if self.note else "")


def load_final(session_dir: Path | str) -> FinalEvaluation | None:
    """The session's final evaluation (None: not run, ``FT_FINAL_EVAL=none``, or unreadable)."""
    path = Path(session_dir) / FINAL_FILE
    try:
        return FinalEvaluation.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
