"""LLMProposer: one JSON call turns the trace into the next hypothesis.

The prompt is built from a *planner view* of the trace (:func:`planner_view`), a copy with every test
score removed, so test results cannot reach a prompt even by accident.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, field_validator

from ftagent.core.types import Hypothesis, SamplingPlan
from ftagent.llm.budget import Section
from ftagent.planners.llm.brief import (
    DATA_RULES,
    DATASETS,
    HARDWARE,
    ITEM_SPACE,
    JUDGING,
    MEMORY,
    MODEL,
    OBJECTIVE,
)
from ftagent.planners.llm.history import experiment_block, is_internal_error, throughput_line
from ftagent.planners.llm.prompting import brief_part, budgets_part, contamination_summary, fit, text_part
from ftagent.planners.llm.templates import render
from ftagent.planners.llm.view import PlannerExperiment, PlannerView, planner_view

if TYPE_CHECKING:
    from ftagent.core.settings import Settings
    from ftagent.core.trace import Trace
    from ftagent.core.types import ScenarioInfo
    from ftagent.engine.loop import StepContext
    from ftagent.engine.session import SessionState
    from ftagent.llm.client import LLMClient


def read_artefact(experiment: PlannerExperiment | None, name: str) -> str:
    """Text of an experiment's artefact file, or "" when absent/unreadable."""
    if experiment is None or name not in experiment.artefacts:
        return ""
    try:
        return Path(experiment.artefacts[name]).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def history_sections(view: PlannerView, forecast: Any = None) -> list[Section]:
    """The results so far: baseline, the current best in full, its siblings, the rest in short.

    Before any training run finished, the session's ``forecast`` (measured s/step, s/epoch, time share
    per loop) stands in for the measured speed.
    """
    from ftagent.planners.llm.estimate import estimate_line, speed_update_line
    from ftagent.planners.llm.history import run_batch, run_rows_per_s, run_speed
    from ftagent.planners.llm.numbers import format_score

    block = partial(experiment_block, baseline=view.baseline_val, core_metric=view.core_metric, direction=view.direction)
    parent = view.get(view.sota_loop)
    metric = view.core_metric
    lines = [f"- Baseline (base model): validation {metric} {format_score(view.baseline_val, metric)} "
             f"({'higher' if view.direction == 'max' else 'lower'} is better)"]
    if parent is not None:
        lines.append(f"- Current best: loop {parent.loop}, validation {metric} {format_score(parent.val_score, metric)}")
    lines.append("- " + experiment_counts(view))
    trained = [e for e in view.experiments if throughput_line(e)]
    if not trained:
        lines.append(estimate_line(forecast)
                     or "- Training speed on this hardware: not measured yet (no training run has finished)")
    elif speed := speed_update_line(forecast, trained[-1].loop, *(run_speed(trained[-1]) or (0.0, 0)),
                                    rows_per_s=run_rows_per_s(trained[-1]), batch=run_batch(trained[-1])):
        lines.append(speed)
    out = [Section(key="results", title="Results so far", body="\n".join(lines), required=True)]
    if parent is not None:
        first, rest = block(parent, detail="full", best=True).split("\n", 1)
        out.append(Section(key="best", title=first.lstrip("# "), level=3, required=True, body=rest))
    siblings = view.siblings(view.sota_loop)
    for i, exp in enumerate(reversed(siblings)):  # the latest first: it is the most useful
        detail = "full" if i == 0 else "short"
        out.append(Section(key=f"sibling:{exp.loop}", title="", priority=80 - min(i, 30),
                           body=block(exp, detail=detail)))
    if siblings:
        out.insert(len(out) - len(siblings), Section(
            key="siblings", title=f"Already tried from {'loop ' + str(parent.loop) if parent else 'the base model'}",
            body=f"{len(siblings)} of the {len(view.experiments)} experiment(s) above started from it, the latest "
                 "first:", level=2, priority=80))
    others = [e for e in view.experiments if e.parent != view.sota_loop and e is not parent]
    if others:
        lineage = _ancestors(view, parent)
        body = "\n\n".join(("(an ancestor of the current best)\n" if e.loop in lineage else "")
                           + block(e, detail="short") for e in others[-8:])
        out.append(Section(key="earlier", title="Earlier experiments (the best's ancestors and other branches)",
                           level=2, body=body, priority=35))
    return out


def _ancestors(view: PlannerView, exp: Any) -> set[int]:
    """Loops the experiment was built on, parent first (empty for a child of the base model)."""
    seen: set[int] = set()
    while exp is not None and exp.parent is not None and exp.parent not in seen:
        seen.add(exp.parent)
        exp = view.get(exp.parent)
    return seen


def experiment_counts(view: PlannerView) -> str:
    """``Experiments finished so far (…): 2 (loops 0, 1) — 1 with a validation score, 1 failed (...)``."""
    exps = view.experiments
    scored = sum(1 for e in exps if e.val_score is not None and e.failure is None)
    internal = sum(1 for e in exps if is_internal_error(e.failure))
    failed = sum(1 for e in exps if e.failure is not None) - internal
    parts = [f"{scored} with a validation score"]
    if failed:
        parts.append(f"{failed} failed")
    if internal:
        parts.append(f"{internal} stopped by an internal error of the system")
    loops = ("…, " if len(exps) > 12 else "") + ", ".join(str(e.loop) for e in exps[-12:])
    which = f" (loop{'s' if len(exps) > 1 else ''} {loops})" if exps else ""
    # "run so far: 1" beside loops 1 and 2 in flight read as a count of started loops (relay round r2)
    return (f"Experiments finished so far (failed ones included; loops still running are not counted): "
            f"{len(exps)}{which} — " + ", ".join(parts))


def sota_rule(view: PlannerView, min_delta: float, rule: str = "interval", stops_at_maximum: bool = True) -> str:
    """How the best is chosen (``FT_SOTA_RULE``, decided by :func:`ftagent.core.sota.decide_sota`), and a
    note when the best already reaches the metric's maximum."""
    from ftagent.planners.llm.numbers import format_score

    better = "higher" if view.direction == "max" else "lower"
    # the split that decides (relay round r1: the rule said "validation" beside a verdict on the selection part)
    scope = "selection part of validation (never shown to you)" if view.selection_decides else "validation split"
    if rule == "interval":
        bar = "0" if min_delta <= 0 else f"FT_SOTA_MIN_DELTA = {min_delta:g}"
        text = (f"An experiment becomes the new best only when its {view.core_metric} gain on the {scope} over the "
                "current best (or the baseline) is significant: the two models are compared item by item on the "
                "same items, and the lower bound of the 95 % paired bootstrap interval of the "
                f"difference must be above {bar}. A tie, or a gain inside the noise (\"+3.0 [-4.0, +10.0] on 100 "
                "items: not a significant gain\"), keeps the current best; where no interval exists the "
                f"{view.core_metric} must be {better} by more than FT_SOTA_MIN_DELTA = {min_delta:g}. "
                "The final model is the best one at the end of the session.")
    else:
        text = (f"An experiment becomes the new best only when its {view.core_metric} on the {scope} is {better} "
                f"than the current best's (or the baseline's) by more than FT_SOTA_MIN_DELTA = {min_delta:g}; a tie "
                "keeps the current best. The final model is the best one at the end of the session.")
    if at_maximum(view):
        _, score = view.incumbent()
        text += (f" The current best already scores {format_score(score, view.core_metric)}, the metric's maximum: "
                 "nothing can be gained on the validation split and no later loop can replace it (a tie keeps it)."
                 + (" Once a loop scores it, the session starts no further loop." if stops_at_maximum else
                    " The session still runs every loop of --loop-n (FT_STOP_AT_MAXIMUM=false)."))
    return text


def at_maximum(view: PlannerView) -> bool:
    """The current best (or the baseline) scores the metric's maximum on validation."""
    from ftagent.planners.llm.numbers import scores_maximum

    _, score = view.incumbent()
    return scores_maximum(score, view.core_metric, view.direction)


def sota_rule_of(view: PlannerView, settings: Any) -> str:
    """:func:`sota_rule` with the session's ``FT_SOTA_RULE``, ``FT_SOTA_MIN_DELTA`` and ``FT_STOP_AT_MAXIMUM``."""
    ft = getattr(settings, "ft", None)
    return sota_rule(view, float(getattr(ft, "sota_min_delta", 0.0) or 0.0), str(getattr(ft, "sota_rule", "interval")),
                     bool(getattr(ft, "stop_at_maximum", True)))


def build_proposal_messages(scenario: ScenarioInfo, view: PlannerView, settings: Settings,
                            ctx: Any = None, *, count: int = 1,
                            running: list[Hypothesis] | None = None) -> list[dict[str, str]]:
    """System + user messages for the proposal call, from the test-free planner view, fitted to the budget.

    K trials at once (issue 41): ``count`` proposals are asked for at once, and ``running`` (the hypotheses the
    other trials test now) are shown so that none is proposed again.
    """
    parent = view.get(view.sota_loop)
    from ftagent.planners.llm.stages import stages_rule

    enabled = list(getattr(getattr(settings, "ft", None), "stages", None) or ["sft"])
    system = render("proposal_system", has_parent=parent is not None, parent_loop=getattr(parent, "loop", None),
                    upper_data_size_limit=scenario.upper_data_size_limit,
                    sota_rule=sota_rule_of(view, settings),
                    llm_pools=llm_pools_configured(settings), stages_rule=stages_rule(enabled),
                    stages_enabled="" if enabled == ["sft"] else ", ".join(enabled), count=count)
    sections = [
        text_part("scenario", "", "# Scenario", required=True),  # a heading only: the sections below are its body
        brief_part(scenario, OBJECTIVE, required=True),
        brief_part(scenario, JUDGING, required=True),  # which split decides the best: the plan depends on it
        brief_part(scenario, ITEM_SPACE, required=True),
        brief_part(scenario, MODEL, 90),
        brief_part(scenario, HARDWARE, 70),
        brief_part(scenario, MEMORY, 60),
        budgets_part(scenario, ctx, 65),
        brief_part(scenario, DATA_RULES, required=True, extra=contamination_summary(scenario)),
        brief_part(scenario, DATASETS, 75),
        *history_sections(view, getattr(scenario, "forecast", None)),
    ]
    parent_script = read_artefact(parent, "process_data.py")
    if parent_script:
        sections.append(text_part("parent_script", f"process_data.py of loop {parent.loop}",  # type: ignore[union-attr]
                                  f"```python\n{parent_script.rstrip()}\n```", 55, level=2))
    if running:  # what the other trials test now: required, or a slot would run the same experiment twice
        sections.append(text_part("running", "Running now on the other slots (results not in yet)",
                                  running_words(running, ctx), required=True, level=2))
    last = view.experiments[-1] if view.experiments else None
    sections.append(text_part("ask", "", render("proposal_user", parent=parent, tried=bool(view.experiments),
                                                internal=last is not None and is_internal_error(last.failure),
                                                saturated=at_maximum(view)),
                              required=True))
    fitted = fit(sections, settings, system)
    return [{"role": "system", "content": system}, {"role": "user", "content": fitted.text}]


def running_words(running: list[Hypothesis], ctx: Any) -> str:
    """One line per running experiment, named by its loop (relay round r2: the lines named none, beside a budget
    line that counted loops); a hypothesis no running loop holds was proposed in this round and waits for a slot."""
    from ftagent.planners.llm.prompting import trials_in_flight

    in_flight = trials_in_flight(ctx)
    if in_flight is None:  # a context that knows no loops in flight
        return "\n".join(f"- {h.hypothesis} Task: {h.task}" for h in running)
    loops = [(i, h) for i, h in in_flight[1] if h is not None]
    lines = []
    for h in running:
        loop = next((i for i, peer in loops if peer == h), None)
        who = f"loop {loop}" if loop is not None else "proposed in this round, not started yet"
        lines.append(f"- {who}: {h.hypothesis} Task: {h.task}")
    return "\n".join(lines)


def llm_pools_configured(settings: Any) -> bool:
    """True when STRONG_MODEL_POOL or WEAK_MODEL_POOL (``FT_STRONG_MODELS`` / ``FT_WEAK_MODELS``) is non-empty."""
    ft = getattr(settings, "ft", None)
    return bool(getattr(ft, "strong_models", None) or getattr(ft, "weak_models", None))


class ProposalReply(BaseModel):
    """What the proposal call must return."""

    reason: str = ""
    hypothesis: str
    task: str = ""
    skip_data_processing: bool = False
    stage: str = "sft"  # issue 40: one of FT_STAGES (checked when the loop's stage is prepared)
    weights_from: int | None = None  # the loop whose weights it starts from; null: the base model
    sampling: SamplingPlan | None = None
    rows: int | None = None  # issue 43: the training rows planned, which the config prompt sizes the run by

    @field_validator("rows", mode="before")
    @classmethod
    def _row_count(cls, value: Any) -> Any:
        """A positive count ("1,100" read as 1100); anything else is no count: the field only sizes the config,
        so a reply is never refused for it."""
        if isinstance(value, str):
            value = value.replace(",", "").replace("_", "").strip()
            value = int(value) if value.isdigit() else None
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    @field_validator("stage", mode="before")
    @classmethod
    def _known(cls, value: Any) -> Any:
        from ftagent.core.stage_specs import stage_spec

        if isinstance(value, str):
            value = value.strip().lower()
            stage_spec(value)  # an unknown stage: the reply is refused with a did-you-mean
        return value


class ProposalBatch(BaseModel):
    """What the proposal call returns when it is asked for several at once."""

    proposals: list[ProposalReply]


class LLMProposer:
    """Proposes the next experiment with one validated JSON call; the parent is the current SOTA."""

    def __init__(self, scenario: ScenarioInfo, settings: Settings, client: LLMClient | None = None) -> None:
        self.scenario = scenario
        self.settings = settings
        self.client = client

    def propose(self, trace: Trace, ctx: StepContext[SessionState]) -> Hypothesis:
        """Ask the LLM for reason, hypothesis, task and skip_data_processing."""
        scenario = self.scenario
        from ftagent.llm.client import LLMClient

        client = self.client or LLMClient.for_context(self.settings, ctx)
        view = planner_view(trace)
        reply = client.chat_json(build_proposal_messages(scenario, view, self.settings, ctx), ProposalReply,
                                 stage="proposal")
        return self._hypothesis(reply, view)

    def propose_batch(self, trace: Trace, ctx: StepContext[SessionState], *, n: int,
                      running: list[Hypothesis]) -> list[Hypothesis]:
        """K trials at once: ``n`` proposals in one call, told what the running trials test (issue 41)."""
        from ftagent.llm.client import LLMClient

        client = self.client or LLMClient.for_context(self.settings, ctx)
        view = planner_view(trace)
        messages = build_proposal_messages(self.scenario, view, self.settings, ctx, count=n, running=running)
        if n <= 1:
            return [self._hypothesis(client.chat_json(messages, ProposalReply, stage="proposal"), view)]
        batch = client.chat_json(messages, ProposalBatch, stage="proposal")
        return [self._hypothesis(reply, view) for reply in batch.proposals[:n]] or [self.propose(trace, ctx)]

    def _hypothesis(self, reply: ProposalReply, view: PlannerView) -> Hypothesis:
        parent = view.get(view.sota_loop)
        can_skip = parent is not None and bool(read_artefact(parent, "process_data.py"))
        same_data = parent is not None and parent.hypothesis is not None and parent.hypothesis.stage == reply.stage
        return Hypothesis(reason=reply.reason, hypothesis=reply.hypothesis, task=reply.task,
                          skip_data_processing=reply.skip_data_processing and can_skip and same_data,
                          parent=view.sota_loop, planner="llm", stage=reply.stage, weights_from=reply.weights_from,
                          sampling=reply.sampling, rows=reply.rows)
