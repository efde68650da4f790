"""LLMProposer: one JSON call turns the trace into the next hypothesis.

The prompt is built from a *planner view* of the trace (:func:`planner_view`), a copy with every test
score removed, so test results cannot reach a prompt even by accident.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from ftagent.core.errors import StepFailure
from ftagent.core.types import Hypothesis
from ftagent.planners.llm.templates import render

if TYPE_CHECKING:
    from ftagent.core.settings import Settings
    from ftagent.core.trace import Trace
    from ftagent.core.types import ScenarioInfo
    from ftagent.engine.loop import StepContext
    from ftagent.planners.llm.client import LLMClient


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
    val_score: float | None = None
    val_metrics: dict[str, Any] = {}
    decision: bool = False
    reason: str = ""
    failure: StepFailure | None = None


class PlannerView(BaseModel):
    """The trace without test data: what every LLM prompt is built from."""

    core_metric: str = "score"
    direction: str = "max"
    baseline_val: float | None = None
    sota_loop: int | None = None
    experiments: list[PlannerExperiment] = []

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
        sota_loop=trace.sota_loop,
        experiments=[PlannerExperiment(**e.model_dump(exclude={"test_score"})) for e in trace.experiments],
    )


def scenario_text(scenario: ScenarioInfo) -> str:
    """The scenario description for prompts (validation facts only)."""
    if scenario.description_text:
        return scenario.description_text
    lines = [f"Target benchmark: {scenario.benchmark} — {scenario.benchmark_description}".rstrip(" —"),
             f"Core metric: {scenario.core_metric} ({scenario.direction})",
             f"Base model: {scenario.base_model}"]
    if scenario.user_target_scenario:
        lines.append(f"User goal: {scenario.user_target_scenario}")
    lines.append(f"Hardware: {scenario.hardware.summary()}")
    if scenario.time_limits:
        lines.append(f"Time limits (s): {scenario.time_limits}")
    return "\n".join(lines)


def read_artefact(experiment: PlannerExperiment | None, name: str) -> str:
    """Text of an experiment's artefact file, or "" when absent/unreadable."""
    if experiment is None or name not in experiment.artefacts:
        return ""
    try:
        return Path(experiment.artefacts[name]).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def build_proposal_messages(scenario: ScenarioInfo, view: PlannerView, settings: Settings) -> list[dict[str, str]]:
    """System + user messages for the proposal call, from the test-free planner view."""
    parent = view.get(view.sota_loop)
    system = render("proposal_system", scenario_text=scenario_text(scenario), has_parent=parent is not None,
                    upper_data_size_limit=scenario.upper_data_size_limit)
    user = render("proposal_user", baseline_val=view.baseline_val, core_metric=view.core_metric,
                  direction=view.direction, parent=parent, siblings=view.siblings(view.sota_loop),
                  parent_config=read_artefact(parent, "train.yaml"),
                  parent_script=read_artefact(parent, "process_data.py"))
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


class ProposalReply(BaseModel):
    """What the proposal call must return."""

    reason: str = ""
    hypothesis: str
    task: str = ""
    skip_data_processing: bool = False


class LLMProposer:
    """Proposes the next experiment with one validated JSON call; the parent is the current SOTA."""

    def __init__(self, scenario: ScenarioInfo, settings: Settings, client: LLMClient | None = None) -> None:
        self.scenario = scenario
        self.settings = settings
        self.client = client

    def propose(self, trace: Trace, ctx: StepContext) -> Hypothesis:
        """Ask the LLM for reason, hypothesis, task and skip_data_processing."""
        scenario = self.scenario
        from ftagent.planners.llm.client import LLMClient

        client = self.client or LLMClient.for_context(self.settings, ctx)
        view = planner_view(trace)
        reply = client.chat_json(build_proposal_messages(scenario, view, self.settings), ProposalReply,
                                 stage="proposal")
        parent = view.get(view.sota_loop)
        can_skip = parent is not None and bool(read_artefact(parent, "process_data.py"))
        return Hypothesis(reason=reply.reason, hypothesis=reply.hypothesis, task=reply.task,
                          skip_data_processing=reply.skip_data_processing and can_skip,
                          parent=view.sota_loop, planner="llm")
