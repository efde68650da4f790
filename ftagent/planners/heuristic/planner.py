"""The offline heuristic planner: Proposer, Coder and Feedback without any LLM.

It is the embedded default when no ``CHAT_MODEL`` + key is configured (or ``FT_PLANNER=heuristic``),
and it announces itself as such. Its policy (documented in docs/architecture.md) is :mod:`.policy`'s; the
files its coder writes are :mod:`.render`'s (a user's own ``--dataset`` file is first filtered to the rows
that fit the benchmark, :mod:`.data_fit`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ftagent.core.errors import StepFailure
from ftagent.core.sota import decide_sota
from ftagent.core.trace import Experiment, Trace
from ftagent.core.types import CodeResult, FeedbackResult, Hypothesis, ScenarioInfo
from ftagent.planners.heuristic.policy import (
    FORMAT_HYPOTHESIS,
    base_recipe,
    conservative,
    format_problem,
    is_tiny,
    loss_trend,
    next_recipe,
    scaled_steps,
    toggle_method,
)
from ftagent.planners.heuristic.render import (
    data_note,
    data_selections,
    render_process_data,
    render_train_yaml,
)
from ftagent.planners.heuristic.stage_code import (
    render_stage_data_script,
    render_stage_yaml,
    stage_hypothesis,
)
from ftagent.planners.heuristic.stages import choose_stage, sft_view

if TYPE_CHECKING:
    from ftagent.engine.context import StepContext
    from ftagent.engine.session import SessionState

PLANNER = "heuristic"


class HeuristicProposer:
    """Proposes the next recipe from the trace (see the module docstring for the policy)."""

    def __init__(self, scenario: ScenarioInfo, settings: Any = None) -> None:
        self.scenario = scenario
        self.stages = list(getattr(getattr(settings, "ft", None), "stages", None) or ["sft"])  # FT_STAGES

    def propose(self, trace: Trace, ctx: StepContext[SessionState]) -> Hypothesis:

        scenario = self.scenario
        choice = choose_stage(trace, self.stages)  # issue 40: leave SFT once it plateaus
        if choice.stage != "sft":
            return stage_hypothesis(choice, trace, scenario, PLANNER, first_recipe=base_recipe(scenario),
                                    tiny=is_tiny(scenario))
        sota, last = sft_view(trace)  # the SFT recipe policy reads the SFT loops only
        parent = sota or (last if last is not None and last.failure is None else None)
        recipe, reason, hypothesis = next_recipe(parent, sota, last, scenario)
        reuse = (parent is not None and bool(parent.artefacts.get("workspace"))
                 and hypothesis != FORMAT_HYPOTHESIS)  # a format problem: process the data again
        plan: dict[str, Any] = {"recipe": recipe}
        note = "" if reuse else data_note(scenario)
        if note:  # what the data step keeps and drops of the user's file (rows per template)
            hypothesis, plan["data_note"] = f"{hypothesis} {note}", note
        return Hypothesis(reason=f"{choice.reason} {reason}".strip(), hypothesis=hypothesis,
                          task=f"Train with {json.dumps(recipe, sort_keys=True)}",
                          skip_data_processing=reuse, parent=parent.loop if parent else None,
                          planner=PLANNER, plan=plan)

    def propose_batch(self, trace: Trace, ctx: StepContext[SessionState], *, n: int, running: list[Hypothesis]) -> list[Hypothesis]:
        """``n`` distinct proposals for trials at once: the policy's next recipe and variants of it
        (:mod:`.spread`), none equal to a running trial's."""
        from ftagent.planners.heuristic.spread import spread

        return spread(self.propose(trace, ctx), n, running, self.scenario, scale=scaled_steps, toggle=toggle_method)


class HeuristicCoder:
    """Writes ``process_data.py`` and ``train.yaml`` for the proposed recipe."""

    def __init__(self, scenario: ScenarioInfo, settings: Any = None) -> None:
        self.scenario = scenario
        self.limit = scenario.upper_data_size_limit

    def code(self, hypothesis: Hypothesis, trace: Trace, workspace: Path,
             feedback: StepFailure | None, ctx: StepContext[SessionState]) -> CodeResult:
        scenario = self.scenario
        recipe = dict(hypothesis.plan.get("recipe") or base_recipe(scenario))
        if feedback is not None:  # a validation round failed: fall back to the safest recipe
            recipe = conservative(recipe, feedback)
        template = scenario.model_info.template or "chatml"
        sft = hypothesis.stage == "sft"  # issue 40: another stage's data comes from the loop's samples.jsonl
        files = {
            "process_data.py": render_process_data(scenario, self.limit) if sft else render_stage_data_script(hypothesis.stage),
            "train.yaml": render_train_yaml(recipe, template) if sft else render_stage_yaml(hypothesis.stage, recipe, template),
        }
        for name, text in files.items():
            (workspace / name).write_text(text, encoding="utf-8")
        (workspace / "recipe.json").write_text(json.dumps(recipe, indent=1), encoding="utf-8")
        plan: dict[str, Any] = {"recipe": recipe, **({"data_note": hypothesis.plan["data_note"]}
                                                     if hypothesis.plan.get("data_note") else {})}
        selections = data_selections(scenario)
        if selections and all(sel.wording is not None for sel in selections.values()):
            plan["data_in_gold_form"] = True  # every user row's answer in the gold's form (data_fit)
        return CodeResult(workspace=str(workspace), files={n: str(workspace / n) for n in files},
                          notes="heuristic planner", plan=plan)


class HeuristicFeedback:
    """Explains the numeric decision and names the next step of the policy."""

    def __init__(self, scenario: ScenarioInfo, settings: Any = None) -> None:
        self.scenario = scenario
        self.min_delta = float(getattr(getattr(settings, "ft", None), "sota_min_delta", 0.0) or 0.0)
        self.rule = str(getattr(getattr(settings, "ft", None), "sota_rule", "interval"))

    def feedback(self, experiment: Experiment, trace: Trace, ctx: StepContext[SessionState]) -> FeedbackResult:
        if experiment.failure is not None:
            f = experiment.failure
            return FeedbackResult(decision=False, error_type=f.error_type.value,
                                  reason=f"Loop failed at {f.stage}: {f.message[:300]}",
                                  next_step=f.suggestion or "Retry with the best known recipe, more conservatively.")
        # the one SOTA rule (FT_SOTA_RULE): its line carries the paired interval when there is one
        verdict = decide_sota(experiment, trace, rule=self.rule, min_delta=self.min_delta)
        better = verdict.decision
        trend = loss_trend(experiment.loss_history)
        reason = f"{verdict.text} {'New best.' if better else 'Not better.'}"
        if experiment.plan.get("data_note"):  # what the data step kept and dropped of the user's file
            reason += f" {experiment.plan['data_note']}"
        advice = {"falling": "loss still falling: train longer", "plateau_high": "loss flat and high: lower lr",
                  "converged": "loss converged", "unknown": "too few loss points to judge"}[trend]
        if format_problem(experiment):  # not under-training: the benchmark found no answer it could score
            advice = ("low training loss but a zero score: a format problem, not under-training -- write the "
                      "training answers in the benchmark's answer format")
        return FeedbackResult(decision=better, reason=reason, next_step=advice)
