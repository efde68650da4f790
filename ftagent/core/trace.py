"""The experiment trace: a DAG of experiments (one a loop) and the numeric SOTA rule."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from ftagent.core.approved import Approved
from ftagent.core.errors import StepFailure
from ftagent.core.forgetting_rule import GuardResult
from ftagent.core.holdout import Holdout, PartResult
from ftagent.core.sota_family import Judgment
from ftagent.core.stats import Difference
from ftagent.core.types import AnswerProfile, Hypothesis

Direction = Literal["max", "min"]


class Experiment(BaseModel):
    """One loop's experiment, as the proposer, the UI and the report see it."""

    loop: int
    parent: int | None = None
    hypothesis: Hypothesis | None = None
    artefacts: dict[str, str] = Field(default_factory=dict)  # name -> path (workspace, model, logs)
    plan: dict[str, Any] = Field(default_factory=dict)  # the plan the coder actually wrote (heuristic recipe)
    config: dict[str, Any] = Field(default_factory=dict)  # the train.yaml that was actually trained
    system_changes: list[str] = Field(default_factory=list)  # what the validator changed in the planner's config
    data_rows: int | None = None  # rows of data.json that training used
    loss_history: list[dict[str, Any]] = Field(default_factory=list)
    error_samples: list[dict[str, Any]] = Field(default_factory=list)  # validation only
    val_answers: AnswerProfile | None = None  # how the model answered the validation split
    val_score: float | None = None
    val_metrics: dict[str, Any] = Field(default_factory=dict)
    test_score: float | None = None  # report only: never shown to a planner
    val_items: str | None = None  # per-item scores (ftagent.core.stats.ItemScores JSON) of the validation split
    # the validation score of each part (feedback, selection; ftagent.core.holdout), from the one run's items
    parts: dict[str, PartResult] = Field(default_factory=dict)
    test_items: str | None = None  # ... of the test split (report only)
    intervals: list[Difference] = Field(default_factory=list)  # vs baseline / SOTA, validation and test
    integrity_flags: list[str] = Field(default_factory=list)  # the integrity guard's flagged checks (issue 31.5)
    eval_configs: dict[str, str] = Field(default_factory=dict)  # split -> its evaluation's config digest
    forgetting: list[GuardResult] = Field(default_factory=list)  # the forgetting guard's verdicts (issue 31.6)
    judged: Judgment | None = None  # against whom and in which round the SOTA rule judged it (core.sota_family)
    decision: bool = False
    reason: str = ""
    next_step: str = ""  # the feedback's advice for the next experiment
    failure: StepFailure | None = None
    approved: Approved | None = None  # what validation approved, frozen outside the workspace (issue 39 item 2)

    @property
    def succeeded(self) -> bool:
        return self.failure is None and self.val_score is not None


def beats(candidate: float | None, incumbent: float | None, direction: Direction, min_delta: float) -> bool:
    """True when ``candidate`` beats ``incumbent`` by more than ``min_delta`` in the metric's direction.

    Ties (and differences within ``min_delta``) keep the incumbent. A missing incumbent is beaten by
    any real score; a missing candidate never wins.
    """
    if candidate is None:
        return False
    if incumbent is None:
        return True
    diff = candidate - incumbent if direction == "max" else incumbent - candidate
    return diff > min_delta


class Trace(BaseModel):
    """All experiments of a session plus the baseline; decides and remembers the SOTA."""

    core_metric: str = "score"
    direction: Direction = "max"
    baseline_val: float | None = None
    baseline_test: float | None = None
    baseline_val_items: str | None = None  # per-item scores of the baseline (ftagent.core.stats.ItemScores JSON)
    baseline_test_items: str | None = None
    # validation's feedback and selection parts (issue 39 item 5): the split, and the baseline's part scores
    holdout: Holdout | None = None
    baseline_parts: dict[str, PartResult] = Field(default_factory=dict)
    baseline_eval_configs: dict[str, str] = Field(default_factory=dict)  # split -> the baseline's config digest
    experiments: list[Experiment] = Field(default_factory=list)
    sota_loop: int | None = None
    # candidates judged against one incumbent per round: the session's slots (FT_PARALLEL_TRIALS); the SOTA
    # rule's family-wise correction (Holm, ftagent.core.sota_family) spans a round
    family_size: int = 1

    def sota(self) -> Experiment | None:
        """The current best experiment, or None while the baseline is still best."""
        return self.get(self.sota_loop) if self.sota_loop is not None else None

    def get(self, loop: int) -> Experiment | None:
        return next((e for e in self.experiments if e.loop == loop), None)

    def incumbent_score(self) -> float | None:
        sota = self.sota()
        return sota.val_score if sota is not None else self.baseline_val

    def is_new_sota(self, val_score: float | None, min_delta: float) -> bool:
        """The numeric SOTA rule: beat the current SOTA (or the baseline) by more than ``min_delta``."""
        return beats(val_score, self.incumbent_score(), self.direction, min_delta)

    def record(self, experiment: Experiment) -> None:
        """Add (or replace) a loop's experiment; it becomes SOTA only if ``decision`` is True."""
        # one new sorted list, bound at once: a step of another trial reading the trace meanwhile (K trials at
        # once) sees the old list or the new one, never one half-sorted (list.sort empties it while it runs)
        self.experiments = sorted([e for e in self.experiments if e.loop != experiment.loop] + [experiment],
                                  key=lambda e: e.loop)
        if experiment.decision:
            self.sota_loop = experiment.loop

    def siblings(self, parent: int | None) -> list[Experiment]:
        """Experiments that share ``parent`` (what was already tried from the same starting point)."""
        return [e for e in self.experiments if e.parent == parent]
