"""What a planner may see of the trace: experiments without test scores (the types have no field
for them), and the numbers every prompt quotes (the incumbent, the siblings of a parent)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ftagent.core.errors import StepFailure
from ftagent.core.trace import Trace
from ftagent.core.types import AnswerProfile, Hypothesis


class PlannerExperiment(BaseModel):
    """An experiment as a planner may see it: no test scores (the class has no field for them)."""

    loop: int
    parent: int | None = None
    hypothesis: Hypothesis | None = None
    artefacts: dict[str, str] = {}
    plan: dict[str, Any] = {}
    config: dict[str, Any] = {}
    system_changes: list[str] = []
    data_rows: int | None = None
    loss_history: list[dict[str, Any]] = []
    error_samples: list[dict[str, Any]] = []
    val_answers: AnswerProfile | None = None
    val_score: float | None = None
    val_metrics: dict[str, Any] = {}
    decision: bool = False
    reason: str = ""
    next_step: str = ""
    failure: StepFailure | None = None
    integrity_flags: list[str] = []  # the integrity guard's flags ("<check>: <detail>"): not eligible as best
    parts: dict[str, Any] = {}  # validation's feedback and selection part scores (aggregates only; issue 39.5)


class PlannerView(BaseModel):
    """The trace without test data: what every LLM prompt is built from."""

    core_metric: str = "score"
    direction: str = "max"
    baseline_val: float | None = None
    sota_loop: int | None = None
    experiments: list[PlannerExperiment] = []
    selection_decides: bool = False  # validation is split: its selection part decides the best (issue 39.5)

    def get(self, loop: int | None) -> PlannerExperiment | None:
        return next((e for e in self.experiments if e.loop == loop), None) if loop is not None else None

    def siblings(self, parent: int | None) -> list[PlannerExperiment]:
        return [e for e in self.experiments if e.parent == parent]

    def incumbent(self) -> tuple[int | None, float | None]:
        sota = self.get(self.sota_loop)
        return (sota.loop, sota.val_score) if sota is not None else (None, self.baseline_val)


def planner_view(trace: Trace) -> PlannerView:
    """Copy ``trace`` without ``test_score`` and ``baseline_test``."""
    return PlannerView(
        core_metric=trace.core_metric, direction=trace.direction, baseline_val=trace.baseline_val,
        sota_loop=trace.sota_loop, selection_decides=trace.holdout is not None,
        experiments=[PlannerExperiment(**e.model_dump(exclude={"test_score"})) for e in trace.experiments],
    )
