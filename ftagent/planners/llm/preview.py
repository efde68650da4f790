"""What the LLM planner would be sent, without sending it (``ftagent prompts``, golden tests).

:func:`preview` builds the messages of one step (``propose``, ``data``, ``config``, ``feedback``)
exactly as the components do, from a scenario and a trace. Where a step needs an input that does
not exist yet (no hypothesis before the first proposal, no experiment before the first loop), a
clearly marked placeholder stands in for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from ftagent.core.trace import Experiment, Trace
from ftagent.core.types import Hypothesis
from ftagent.llm.budget import message_tokens
from ftagent.planners.llm.code_context import config_extra
from ftagent.planners.llm.code_messages import config_messages, data_messages
from ftagent.planners.llm.feedback import decide_numeric, feedback_messages
from ftagent.planners.llm.propose import build_proposal_messages, read_artefact
from ftagent.planners.llm.view import planner_view

if TYPE_CHECKING:
    from ftagent.core.types import ScenarioInfo

Step = Literal["propose", "data", "config", "feedback"]
STEPS: tuple[Step, ...] = ("propose", "data", "config", "feedback")
PLACEHOLDER = Hypothesis(hypothesis="(placeholder: the hypothesis the proposal step returns goes here)",
                         task="(placeholder: the proposal's task goes here)", planner="llm")


class Preview(BaseModel):
    """The messages of one step and their size."""

    step: str
    messages: list[dict[str, str]]
    tokens: int
    budget: int
    note: str = ""


def _latest(trace: Trace) -> Experiment | None:
    return trace.experiments[-1] if trace.experiments else None


def preview(step: Step, scenario: ScenarioInfo, settings: Any, trace: Trace | None = None, *,
            hypothesis: Hypothesis | None = None, workspace: Path | None = None, ctx: Any = None) -> Preview:
    """The request the planner would send for ``step``.

    Args:
        step: ``propose``, ``data``, ``config`` or ``feedback``.
        scenario: the session's scenario.
        settings: the settings (the prompt budget, ``FT_FORCE_THINK_TOKEN``).
        trace: the experiments so far (default: none).
        hypothesis: the hypothesis the coder works on (default: the latest experiment's, else a placeholder).
        workspace: the loop workspace (the config prompt reads the debug data from it).
        ctx: a step context (for the time left); None in previews.
    """
    from ftagent.planners.llm.prompting import budget_of

    trace = trace or Trace(core_metric=scenario.core_metric, direction=scenario.direction,
                           baseline_val=scenario.baseline.score if scenario.baseline else None)
    latest = _latest(trace)
    note = ""
    if hypothesis is None:
        hypothesis = latest.hypothesis if latest is not None and latest.hypothesis is not None else None
        if hypothesis is None:
            hypothesis = PLACEHOLDER
            note = "" if step == "propose" else "no proposal yet: a placeholder stands in for the hypothesis"
    if step == "propose":
        messages = build_proposal_messages(scenario, planner_view(trace), settings, ctx)
    elif step == "data":
        parent = planner_view(trace).get(hypothesis.parent)
        messages = data_messages(scenario, settings, hypothesis, read_artefact(parent, "process_data.py"), "", ctx)
    elif step == "config":
        view = planner_view(trace)
        parent = view.get(hypothesis.parent)
        changes = parent.system_changes if parent is not None else []
        messages = config_messages(scenario, settings, hypothesis, workspace, read_artefact(parent, "train.yaml"),
                                   "", ctx, changes, extra=config_extra(workspace, view, scenario, hypothesis))
    elif step == "feedback":
        if latest is None:
            latest = Experiment(loop=0, hypothesis=hypothesis)
            note = "no loop has run yet: a placeholder experiment without results stands in"
            trace = trace.model_copy(update={"experiments": []})
        else:
            trace = trace.model_copy(update={"experiments": [e for e in trace.experiments if e.loop != latest.loop],
                                             "sota_loop": trace.sota_loop if trace.sota_loop != latest.loop
                                             else latest.parent})
        decision, _ = decide_numeric(latest, trace, settings.ft.sota_min_delta, settings.ft.sota_rule)
        messages = feedback_messages(scenario, settings, latest, trace, decision, ctx)
    else:
        raise ValueError(f"unknown step {step!r}; use one of {', '.join(STEPS)}")
    return Preview(step=step, messages=messages, tokens=message_tokens(messages), budget=budget_of(settings),
                   note=note)


def as_text(p: Preview) -> str:
    """The preview as the terminal shows it: a header line, then each message."""
    lines = [f"===== {p.step}: {p.tokens:,} tokens (budget {p.budget:,})" + (f" — {p.note}" if p.note else "")]
    for message in p.messages:
        lines += [f"----- {message['role']}", message["content"].rstrip()]
    return "\n".join(lines) + "\n"
