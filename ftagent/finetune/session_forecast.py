"""The session's forecast before a run: the probes (:mod:`.probes`, cached by :mod:`.probe_cache`) and the
planner's LLM use (:mod:`.llm_cost`) scaled to the session by :mod:`ftagent.core.forecast_arithmetic`.

``ftagent plan`` runs the baseline itself (it is cached by model and benchmark, so the session then reuses it);
a session reads its own baseline's events and records its forecast once, after the baseline.

Nothing here writes into a session folder except :func:`record_forecast`'s one event.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ftagent.core.forecast_arithmetic import EvalProbe, Forecast, TrainProbe, build_forecast
from ftagent.finetune.llm_cost import COMPLETION_TOKENS, llm_forecast
from ftagent.finetune.probes import evaluation_cost, first_recipe, measure_training, train_plan

if TYPE_CHECKING:
    from ftagent.core.settings import Settings
    from ftagent.core.types import ScenarioInfo
    from ftagent.engine.session import Session
    from ftagent.finetune.resolve import ResolvedRun
    from ftagent.finetune.state import FinetuneSessionState
    from ftagent.runners.base import Runner


def memory_line(scenario: ScenarioInfo, method: str) -> str:
    """One line of the memory plan for the planned method."""
    for m in scenario.memory.get("methods") or []:
        if str(m.get("method", "")).startswith(method):
            need = m.get("peak_gb") or m.get("total_gb") or m.get("estimate_gb")
            fits = m.get("fits")
            return (f"{m.get('method')}: " + (f"~{float(need):.1f} GB, " if need is not None else "")
                    + ("fits" if fits else "does not fit" if fits is not None else "fit unknown"))
    first = (scenario.memory_report or "").strip().splitlines()
    return first[0] if first else "no memory plan"


def final_items(scenario: ScenarioInfo, settings: Settings, assumptions: list[str]) -> int:
    """Items per model the final evaluation runs (``FT_FINAL_EVAL=full`` with items beyond the test split;
    0 otherwise: it then reuses the recorded test scores), said in ``assumptions``."""
    from ftagent.core.paths import benchmark_data_dir
    from ftagent.finetune.final_evaluation import extra_items

    if getattr(settings.ft, "final_eval", "full") != "full" or not settings.ft.file_path:
        return 0
    full_n, test_n = extra_items(benchmark_data_dir(Path(settings.ft.file_path).absolute(), scenario.benchmark))
    if full_n <= test_n:
        return 0
    assumptions.append(f"the final evaluation scores the base and the best model on {full_n} items (every item "
                       f"outside validation, {full_n - test_n} beyond the test split)")
    return full_n


def make_forecast(scenario: ScenarioInfo, settings: Settings, train: TrainProbe, evaluation: EvalProbe, *,
                  planner: str, loop_n: int,
                  timeout_s: float | None, baseline_needed: bool, probe_cost_s: float = 0.0,
                  recipe: dict[str, Any] | None = None, events: list[Any] | None = None) -> Forecast:
    """Scale the probes to the session: loop 0 as the first recipe, later loops as the planner grows it."""
    from ftagent.finetune.forgetting_guard import guard_items
    from ftagent.planners.heuristic.policy import MAX_STEPS_CAP
    from ftagent.planners.registry import planner_spec

    recipe = recipe or first_recipe(scenario)
    plan = train_plan(scenario, recipe)
    spec = planner_spec(planner)  # what the planner declares, never its name
    growth = spec.loop_growth
    what = f"max_steps {plan.max_steps}" if plan.max_steps else f"{plan.rows} rows x {plan.epochs or 1} epoch(s)"
    assumptions = [f"loop 0 trains {plan.method}, {what}, effective batch {plan.effective_batch}"]
    if growth > 1:
        assumptions.append(f"each later loop trains {'twice' if growth == 2 else f'{growth:g} times'} as long as the "
                           "one before (the planner's usual step after a success while the loss still falls; "
                           f"max_steps capped at {MAX_STEPS_CAP})")
    else:
        assumptions.append("every loop trains like loop 0 (the planner resizes later loops after feedback)")
    assumptions += stage_cost_lines(list(getattr(settings.ft, "stages", ["sft"])), train, evaluation)  # issue 40
    from ftagent.finetune.slots import slot_pricing

    slots, train_scale, slot_note = slot_pricing(settings, scenario)  # FT_PARALLEL_TRIALS: the loops' schedule
    if slot_note:
        assumptions.append(slot_note)
    llm = llm_forecast(settings, scenario, planner, loop_n, events)
    if spec.asks_llm:
        assumptions.append(f"the LLM planner is assumed to plan the heuristic planner's first recipe ({plan.method}, "
                           f"{what}) in every loop; its own plan may differ")
        assumptions.append(f"{COMPLETION_TOKENS} completion tokens per LLM call (replies are not known before)")
        assumptions.append(f"{llm.calls // max(1, loop_n)} LLM calls a loop of {llm.s_per_call:.0f} s each "
                           f"({llm.s_source}); code rounds that fail and are retried add more")
    return build_forecast(planner=planner, loop_n=loop_n, plan=plan, train=train, evaluation=evaluation,
                          baseline_needed=baseline_needed, memory=memory_line(scenario, plan.method),
                          llm=llm, timeout_s=timeout_s,
                          assumptions=assumptions, probe_cost_s=probe_cost_s, growth=growth,
                          max_steps_cap=MAX_STEPS_CAP, final_items=final_items(scenario, settings, assumptions),
                          guard_items=guard_items(settings, scenario.benchmark, assumptions), slots=slots,
                          train_scale=train_scale)


def stage_cost_lines(stages: list[str], train: TrainProbe, evaluation: EvalProbe) -> list[str]:
    """What a loop of each enabled non-SFT stage costs next to SFT (issue 40): its step time (the SFT probe's
    × the stage's measured ratio, ``configs/stages.yaml`` step_cost) and its sampling run (the evaluation's
    speed on the default sampling: 128 prompts × 4 answers)."""
    from ftagent.core.stage_specs import stage_spec
    from ftagent.core.types import SamplingPlan

    plan = SamplingPlan()
    sampling_s = evaluation.fixed_s + evaluation.s_per_item * plan.max_prompts * plan.samples_per_prompt
    parts = [f"{name}: ≈ {train.s_per_step * stage_spec(name).step_cost:.2f} s/step ({stage_spec(name).step_cost:g}× "
             f"SFT's {train.s_per_step:.2f}) + sampling ≈ {sampling_s:.0f} s" for name in stages if name != "sft"]
    if not parts:
        return []
    return ["a loop of another stage (FT_STAGES) trains at the SFT probe's speed × the stage's step-cost ratio "
            f"(measured by make bench on CPU) and first samples its start weights ({plan.max_prompts} prompts × "
            f"{plan.samples_per_prompt} answers at the evaluation's speed): " + "; ".join(parts)]


def session_forecast(scenario: ScenarioInfo, settings: Settings, runner: Runner, run: ResolvedRun,
                     events: list[Any], *, planner: str, loop_n: int, timeout_s: float | None,
                     limit: Callable[[float], float]) -> Forecast | None:
    """A session's forecast after its baseline: cached probes, else one training probe (None if it fails).

    The baseline just ran, so its events give the evaluation cost (a cached baseline: the cache).
    """
    evaluation = evaluation_cost(settings, scenario, events)
    if evaluation is None:
        return None
    try:
        train, spent = measure_training(scenario, settings, runner, run, limit=limit)
    except Exception:  # noqa: BLE001 - a forecast never stops a session
        return None
    return make_forecast(scenario, settings, train, evaluation, planner=planner, loop_n=loop_n,
                         timeout_s=timeout_s, baseline_needed=False, probe_cost_s=spent, events=events)


def record_forecast(session: Session[FinetuneSessionState], scenario: ScenarioInfo, settings: Settings, runner: Runner,
                    run: ResolvedRun, *, planner: str, loop_n: int | None, timeout_s: float | None,
                    limit: Callable[[float], float],
                    cpu_slowness: Callable[[], float | None] | None = None) -> Forecast | None:
    """Emit the session's ``forecast`` event once, after the baseline; the LLM planner's brief reads it.

    Cost: 0 s when the training probe is cached for this model/recipe/hardware, else one probe run
    (about the validate step of loop 0: ~25 s for the demo on CPU), each of its steps within ``limit``
    (what is left of the session's ``--timeout``; it raises, and there is no forecast, when nothing is).
    """
    from ftagent.engine.events import ForecastEvent, Message, read_events

    try:
        events = [e.model_dump() for e in read_events(session.events.path)]
        limit(1.0)  # the deadline passed already: no probe (the message says so)
        forecast = session_forecast(scenario, settings, runner, run, events, planner=planner,
                                    loop_n=int(loop_n or 1), timeout_s=timeout_s, limit=limit)
    except Exception as exc:  # noqa: BLE001 - a forecast never stops a session
        session.events.emit(Message(level="warning", text=f"no forecast: {type(exc).__name__}: {exc}"))
        return None
    if forecast is None:
        session.events.emit(Message(level="warning", text="no forecast: the training probe failed or the "
                                                          "evaluation cost is not measured"))
        return None
    forecast.cpu_slowness = cpu_slowness() if cpu_slowness is not None else None  # the re-forecast's reference
    scenario.forecast = forecast
    session.events.emit(ForecastEvent(forecast=forecast))
    return forecast
