"""LLMFeedback: the numbers decide, the LLM explains and advises.

:func:`decide_numeric` applies the SOTA rule (beat the SOTA, or the baseline, by more than
``FT_SOTA_MIN_DELTA`` on the validation core metric; a failed experiment never wins). The LLM then
explains the outcome and proposes the next step; whatever it says about the decision is ignored.
Only validation data reaches the prompt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from ftagent.core.errors import BudgetExhausted, EnvironmentFailure, ErrorType
from ftagent.core.types import FeedbackResult
from ftagent.planners.llm.propose import PlannerExperiment, planner_view, read_artefact, scenario_text
from ftagent.planners.llm.templates import render, sample_loss_history

if TYPE_CHECKING:
    from ftagent.core.settings import Settings
    from ftagent.core.trace import Experiment, Trace
    from ftagent.core.types import ScenarioInfo
    from ftagent.engine.loop import StepContext
    from ftagent.planners.llm.client import LLMClient

MAX_ERROR_SAMPLES = 10


def decide_numeric(experiment: Experiment, trace: Trace, min_delta: float) -> tuple[bool, str]:
    """The SOTA decision by numbers, and a one-line explanation of it."""
    if experiment.failure is not None:
        return False, f"Loop failed at {experiment.failure.stage} ({experiment.failure.error_type.value})."
    if experiment.val_score is None:
        return False, "No validation score, so it cannot become the best."
    incumbent = trace.incumbent_score()
    what = f"loop {trace.sota_loop}" if trace.sota_loop is not None else "the baseline"
    if trace.is_new_sota(experiment.val_score, min_delta):
        return True, f"Validation {trace.core_metric} {experiment.val_score} beats {what} ({incumbent})."
    return False, (f"Validation {trace.core_metric} {experiment.val_score} does not beat {what} "
                   f"({incumbent}) by more than {min_delta}.")


class FeedbackReply(BaseModel):
    """What the feedback call returns (any ``decision`` field in the reply is ignored)."""

    reason: str = ""
    next_step: str = ""
    error_type: str | None = None
    code_summary: str = ""



class LLMFeedback:
    """Decides by numbers, then asks the LLM why and what next (error variant for failed loops)."""

    def __init__(self, scenario: ScenarioInfo, settings: Settings, client: LLMClient | None = None) -> None:
        self.scenario = scenario
        self.settings = settings
        self.client = client

    def feedback(self, experiment: Experiment, trace: Trace, ctx: StepContext) -> FeedbackResult:
        """FeedbackResult with the numeric decision and the LLM's explanation and advice."""
        scenario = self.scenario
        from ftagent.planners.llm.client import LLMCallError, LLMClient

        decision, why = decide_numeric(experiment, trace, self.settings.ft.sota_min_delta)
        error_type = experiment.failure.error_type.value if experiment.failure is not None else None
        client = self.client or LLMClient.for_context(self.settings, ctx)
        try:
            reply = client.chat_json(self._messages(experiment, trace, scenario, decision, ctx), FeedbackReply,
                                     stage="feedback")
        except (BudgetExhausted, EnvironmentFailure):
            raise
        except LLMCallError as exc:  # the numbers still stand; the loop must not crash on advice
            return FeedbackResult(decision=decision, reason=f"{why} (No LLM explanation: {exc.message[:300]})",
                                  error_type=error_type)
        if error_type == ErrorType.UNKNOWN.value and reply.error_type:
            candidate = reply.error_type.strip().upper()
            if candidate in ErrorType.__members__:
                error_type = candidate
        return FeedbackResult(decision=decision, reason=f"{why} {reply.reason}".strip(),
                              error_type=error_type, next_step=reply.next_step)

    def _messages(self, experiment: Experiment, trace: Trace, scenario: ScenarioInfo, decision: bool,
                  ctx: Any) -> list[dict[str, str]]:
        view = planner_view(trace)
        exp = PlannerExperiment(**experiment.model_dump(exclude={"test_score"}))
        common = dict(scenario_text=scenario_text(scenario), loop=exp.loop,
                      hypothesis=exp.hypothesis.hypothesis if exp.hypothesis else "", task=exp.hypothesis.task if exp.hypothesis else "",
                      config=read_artefact(exp, "train.yaml"))
        if exp.failure is not None:
            return [{"role": "user", "content": render("feedback_error", failure=exp.failure, **common)}]
        incumbent_loop, incumbent_score = view.incumbent()
        loss = [p for p in exp.loss_history if isinstance(p, dict)]
        prompt = render("feedback_success", core_metric=view.core_metric, direction=view.direction,
                        val_score=exp.val_score, incumbent_loop=incumbent_loop, incumbent_score=incumbent_score,
                        decision=decision, val_metrics=exp.val_metrics,
                        error_samples=exp.error_samples[:MAX_ERROR_SAMPLES],
                        loss_history=sample_loss_history(loss), loss_points=len(loss), **common)
        return [{"role": "user", "content": prompt}]
