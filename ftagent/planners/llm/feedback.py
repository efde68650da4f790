"""LLMFeedback: the numbers decide, the LLM explains and advises.

:func:`decide_numeric` applies the SOTA rule (``FT_SOTA_RULE``, owned by :mod:`ftagent.core.sota`: a
significant paired gain over the SOTA, or the baseline, on the validation core metric; a failed
experiment never wins). The LLM then
explains the outcome and proposes the next step; whatever it says about the decision is ignored.
Only validation data reaches the prompt.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from ftagent.core.errors import BudgetExhausted, EnvironmentFailure, ErrorType
from ftagent.core.gold_match import GoldMatch, gold_matches
from ftagent.core.sota import decide_sota
from ftagent.core.types import FeedbackResult
from ftagent.planners.llm.brief import HARDWARE, JUDGING, MODEL, OBJECTIVE
from ftagent.planners.llm.history import INTERNAL_NOTE, experiment_block, is_internal_error, short_paths
from ftagent.planners.llm.prompting import brief_part, budgets_part, fit, text_part
from ftagent.planners.llm.propose import read_artefact, sota_rule_of
from ftagent.planners.llm.templates import clip, render
from ftagent.planners.llm.view import PlannerExperiment, planner_view

if TYPE_CHECKING:
    from ftagent.core.settings import Settings
    from ftagent.core.trace import Experiment, Trace
    from ftagent.core.types import ScenarioInfo
    from ftagent.engine.loop import StepContext
    from ftagent.engine.session import SessionState
    from ftagent.llm.client import LLMClient

MAX_ERROR_SAMPLES = 10
# every failure type a step can report (ErrorType is the one source); UNKNOWN is the internal-error variant
# (INTERRUPTED too: a signal stopped the step, no cause the planner could name or change)
REPORTED_TYPES = [t.value for t in ErrorType if t not in (ErrorType.UNKNOWN, ErrorType.INTERRUPTED)]


def decide_numeric(experiment: Experiment, trace: Trace, min_delta: float,
                   rule: str = "interval") -> tuple[bool, str]:
    """The SOTA decision by numbers (``FT_SOTA_RULE``, :func:`ftagent.core.sota.decide_sota`, the rule's
    one owner), and its one-line explanation (with the paired interval when there is one)."""
    verdict = decide_sota(experiment, trace, rule=rule, min_delta=min_delta)
    return verdict.decision, verdict.text


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

    def feedback(self, experiment: Experiment, trace: Trace, ctx: StepContext[SessionState]) -> FeedbackResult:
        """FeedbackResult with the numeric decision and the LLM's explanation and advice."""
        scenario = self.scenario
        from ftagent.llm.client import LLMCallError, LLMClient

        ft = self.settings.ft
        decision, why = decide_numeric(experiment, trace, ft.sota_min_delta, ft.sota_rule)
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
        # "Review:" marks where the system's measured verdict ends and the LLM's reading begins (relay round
        # r1: a later proposal read the reviewer's claims, pasted after the verdict, as measured facts)
        return FeedbackResult(decision=decision, reason=f"{why} Review: {reply.reason}" if reply.reason.strip() else why,
                              error_type=error_type, next_step=reply.next_step)

    def _messages(self, experiment: Experiment, trace: Trace, scenario: ScenarioInfo, decision: bool,
                  ctx: Any) -> list[dict[str, str]]:
        return feedback_messages(scenario, self.settings, experiment, trace, decision, ctx)


def feedback_messages(scenario: ScenarioInfo, settings: Any, experiment: Experiment, trace: Trace, decision: bool,
                      ctx: Any = None) -> list[dict[str, str]]:
    """The feedback request: the scenario, the experiment as trained, its result (validation only)."""
    view = planner_view(trace)
    exp = PlannerExperiment(**experiment.model_dump(exclude={"test_score", "decision"}), decision=decision)
    think = getattr(settings.ft, "force_think_token", False) or scenario.force_think_token
    failed = exp.failure is not None
    internal = is_internal_error(exp.failure)
    intro = (f"You review one fine-tuning experiment that failed with {INTERNAL_NOTE}. Explain what broke, for "
             "the operators; the next experiment needs no change because of it." if internal else
             "You review one fine-tuning experiment that failed, and advise how to avoid the failure." if failed
             else "You review one finished fine-tuning experiment and advise the next one.")
    block = experiment_block(exp, baseline=view.baseline_val, core_metric=view.core_metric,
                             direction=view.direction, detail="full")
    first, rest = block.split("\n", 1) if "\n" in block else (block, "")
    config = read_artefact(exp, "train.yaml")
    sections = [
        text_part("intro", "", intro, required=True),
        brief_part(scenario, OBJECTIVE, 70),
        brief_part(scenario, JUDGING, 65),
        brief_part(scenario, MODEL, 60),
        *([] if internal else [brief_part(scenario, HARDWARE, 50), budgets_part(scenario, ctx, 45, finished=True)]),
        text_part("experiment", first.lstrip("# "), rest, required=True),
    ]
    if config and not exp.config:  # training never ran: show what the planner wrote
        sections.append(text_part("config", "train.yaml as validated", f"```yaml\n{clip(config, 2500)}\n```", 55,
                                  level=2))
    if not failed:
        incumbent_loop, incumbent_score = view.incumbent()
        who = f"Current best (loop {incumbent_loop})" if incumbent_loop is not None else "Baseline (base model)"
        better = "higher" if view.direction == "max" else "lower"
        from ftagent.planners.llm.numbers import format_score

        metric = view.core_metric
        shown = bool(exp.error_samples)
        lines = [f"- This experiment: {format_score(exp.val_score, metric)}", *_part_lines(exp, metric, shown),
                 f"- {who}: {format_score(incumbent_score, metric)}",
                 f"- Decision by the numbers (final, not yours to change): {'new best' if decision else 'not better'}",
                 f"- Why: {short_paths(_verdict(experiment, trace, settings))}",
                 f"- Rule: {sota_rule_of(view, settings)}",
                 f"- Metrics: {json.dumps(exp.val_metrics, ensure_ascii=False, default=str)[:1500]}"]
        sections.append(text_part("result", f"Result on the validation split ({view.core_metric}, {better} is better)",
                                  "\n".join(lines), required=True))
        profile = answer_profile(exp)
        if profile:
            sections.append(text_part("answers", "The model's answers on the validation split", profile, 70, level=2))
        suspect = gold_matches(exp.error_samples)
        if suspect is not None:  # issue 35: right answers scored wrong read as "under-trained"
            sections.append(text_part("evaluation_suspect", "⚠️ Probable EVALUATION error, not a model failure",
                                      evaluation_suspect_words(suspect), required=True, level=2))
        samples = exp.error_samples[:MAX_ERROR_SAMPLES]
        if samples:
            body = "\n".join("- " + clip(json.dumps(x, ensure_ascii=False, default=str), 600) for x in samples)
            wrong = exp.val_answers.wrong if exp.val_answers else 0
            count = f"{len(samples)} of the {wrong} wrong items, chosen at random. " if wrong > len(samples) else ""
            body = (f"{count}The prompts as OpenCompass records them (e.g. `HUMAN: ...`); the model received each "
                    "through its chat template, exactly as in training.\n" + body)
            sections.append(text_part("errors", "Some validation items the model got wrong", body, 65, level=2))
    from ftagent.planners.llm.numbers import scores_maximum

    saturated = scores_maximum(exp.val_score, view.core_metric, view.direction)
    best_loop, best_score = view.incumbent()
    # the session's saturation guard (ftagent.finetune.saturation) starts no loop after a best at the maximum
    session_stops = not failed and bool(getattr(settings.ft, "stop_at_maximum", True)) and (
        (saturated and decision)
        or (best_loop is not None and scores_maximum(best_score, view.core_metric, view.direction)))
    from ftagent.integrity.verdict import CHECK_KINDS, flag_parts

    kinds = [CHECK_KINDS.get(flag_parts(f)[0]) for f in exp.integrity_flags]
    answer = render("feedback_error" if failed else "feedback_success", force_think_token=think,
                    internal=internal, saturated=saturated, session_stops=session_stops,
                    other_stages=_other_stages(settings) if not session_stops else "",
                    wrong_shown=bool(exp.error_samples), error_types=", ".join(REPORTED_TYPES),
                    integrity=bool(kinds), integrity_yours=any(k is None or k.by_experiment for k in kinds),
                    evaluation_suspect=not failed and gold_matches(exp.error_samples) is not None)
    sections.append(text_part("answer", "Answer", answer, required=True))
    return [{"role": "user", "content": fit(sections, settings).text}]


def _other_stages(settings: Any) -> str:
    """``sft,dpo,grpo`` when FT_STAGES enables more than SFT (relay round r3: the reviewer of a stage session was
    never told that its next step could name a DPO or GRPO stage), else ""."""
    enabled = list(getattr(getattr(settings, "ft", None), "stages", None) or ["sft"])
    return ",".join(enabled) if enabled != ["sft"] else ""


def _part_lines(exp: Any, metric: str, shown: bool) -> list[str]:
    """The two parts' scores of validation (issue 39 item 5): which one the shown items come from (relay round
    r2: "the wrong items below are from it" under a 100 % result, with none below), which decides."""
    from ftagent.planners.llm.numbers import format_score

    parts = getattr(exp, "parts", None) or {}
    out = []
    for part, what in (("feedback", "the wrong items below are from it" if shown else "no wrong item of it to show"),
                       ("selection", "never shown to you; it alone decides")):
        found = parts.get(part)
        if found:
            out.append(f"- {part.capitalize()} part ({found.get('count', 0)} items, {what}): "
                       f"{format_score(found.get('score'), metric)}")
    return out


def evaluation_suspect_words(found: GoldMatch) -> str:
    """Why outputs equal to their golds point at the evaluation, and what the planner can do about it."""
    shown = ", ".join(f"`{g}`" for g in found.examples)
    return (f"{found.text()}, e.g. {shown}. The model produced the right answers and the scorer marked them "
            "wrong: this score measures the scorer or the answer format, not the skill, so do not read it as "
            "under-training. Compare these outputs with \"How answers are scored\" above: if they lack the "
            "required format (e.g. the answer inside \\boxed{}), make the training outputs end in that "
            "format; if they already have it, the scorer does not read them, and no training change fixes that "
            "(say so).")


def _verdict(experiment: Experiment, trace: Trace, settings: Any) -> str:
    """The SOTA rule's line on ``experiment`` (its validation interval against the incumbent, if any)."""
    ft = getattr(settings, "ft", None)
    return decide_sota(experiment, trace, rule=str(getattr(ft, "sota_rule", "interval")),
                       min_delta=float(getattr(ft, "sota_min_delta", 0.0) or 0.0)).text


def answer_profile(exp: Any) -> str:
    """Wrong items out of all, and the answers given most often (a constant answer is a collapse)."""
    answers = exp.val_answers
    if answers is None:
        return ""
    if answers.runs > 1:  # every item was answered once per run
        lines = [f"- {answers.wrong} of the {answers.items} validation answers ({answers.items // answers.runs} "
                 f"items × {answers.runs} runs) were scored wrong"]
    else:
        lines = [f"- {answers.wrong} of the {answers.items} validation items were scored wrong"]
    # relay round r2: right answers given twice ("122" × 2 beside "0 of the 12 items were scored wrong") told the
    # planner two gold answers of the feedback part; only wrong answers are named (what the wrong items show), and
    # a collapse's one output (the diagnosis itself; a constant tells no more than the constant-answer baseline)
    if answers.top_wrong:
        top = "; ".join(f"{_quoted(text)} × {n}" for text, n in answers.top_wrong.items())
        lines.append(f"- wrong answers given more than once (as scored), most frequent first: {top}")
    if answers.top:
        text, n = next(iter(answers.top.items()))
        if n >= 0.9 * answers.items:
            lines.append(f"- nearly every item got the same answer, {_quoted(text)} × {n}: the model has collapsed to "
                         "one output")
    return "\n".join(lines)


def _quoted(text: str) -> str:
    return json.dumps(text, ensure_ascii=False) + ("" if text else " (empty)")
