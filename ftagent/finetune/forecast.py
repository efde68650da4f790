"""The forecast before a run: real probes, cached, scaled by :mod:`ftagent.core.forecast`.

* **Training**: the session's first recipe (the heuristic planner's deterministic plan; for the LLM
  planner the same default plan, stated as an assumption) goes through the real code → data (debug)
  → validate steps in a scratch workspace under ``FT_FILE_PATH/forecast/``; the validator's
  micro-batch run is lengthened to ``PROBE_STEPS`` so ``train_runtime ÷ steps`` is a steady s/step.
  The result is cached per (model, method, cutoff, batch, hardware, CPU count and load band), so a
  second forecast is instant; a cached measurement older than ``PROBE_MAX_AGE_S`` (24 h) or made under
  another load band is measured again (issue 32 item 5: a probe from a busier machine a minute earlier
  made a forecast 68 % high).
* **Evaluation**: the baseline OpenCompass run (both splits) read back from its events: the span of
  its inference progress gives s/item, the rest is its fixed cost (start-up + scoring). ``ftagent plan``
  runs the baseline itself (it is cached by model and benchmark, so the session then reuses it); a
  session reads its own baseline. Cached per (model, benchmark, hardware, load), with the same expiry.

Nothing here writes into a session folder except :func:`record_forecast`'s one event.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ftagent.core.forecast import LOAD_BANDS as BAND_BOUNDS
from ftagent.core.forecast import EvalProbe, Forecast, LLMForecast, TrainPlan, TrainProbe, build_forecast

if TYPE_CHECKING:
    from ftagent.core.settings import Settings
    from ftagent.core.types import ScenarioInfo
    from ftagent.engine.events import _Event
    from ftagent.engine.loop import StepContext
    from ftagent.engine.session import Session
    from ftagent.finetune.resolve import ResolvedRun
    from ftagent.finetune.state import FinetuneSessionState
    from ftagent.runners.base import Runner

PROBE_STEPS = 10  # micro-batch steps of the probe (the validator's own check runs 3)
PROBE_MAX_AGE_S = 24 * 3600.0  # a cached probe older than this is measured again (a day: drivers, thermals, load)
# 1-min load average per CPU, upper bounds (core.forecast.LOAD_BANDS owns them: the planner's speed range reads
# the same bands); above the last: overloaded
LOAD_BANDS = tuple((hi, name) for name, (_lo, hi) in BAND_BOUNDS.items() if name != "overloaded")
COMPLETION_TOKENS = 1500  # assumed reply size of one planner call (replies are not known before)
LLM_CALL_S = 60.0  # assumed wall time of one planner call when none was measured (a long reply at ~30 tokens/s)
LLM_PROMPTS = {"propose": ["proposal_system.j2", "proposal_user.j2"], "code": ["data_coder.j2", "config_coder.j2"],
               "feedback": ["feedback_success.j2"]}  # one call per template pair/entry: 4 calls a loop


def forecast_dir(file_path: str | Path) -> Path:
    """``FT_FILE_PATH/forecast``: the probe cache and the probe's scratch workspace."""
    return Path(file_path).absolute() / "forecast"


def _cache_path(file_path: str | Path) -> Path:
    return forecast_dir(file_path) / "probes.json"


def _load_cache(file_path: str | Path) -> dict[str, Any]:
    try:
        cached: dict[str, Any] = json.loads(_cache_path(file_path).read_text(encoding="utf-8"))
        return cached
    except (OSError, ValueError):
        return {}


def _store(file_path: str | Path, key: str, value: dict[str, Any]) -> None:
    path = _cache_path(file_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    cache = _load_cache(file_path)
    cache[key] = value
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(cache, indent=1), encoding="utf-8")
    tmp.replace(path)


def _fresh(entry: dict[str, Any] | None, now: float | None = None) -> dict[str, Any] | None:
    """``entry`` when it was measured less than ``PROBE_MAX_AGE_S`` ago (None: absent, expired, undated)."""
    if not entry or not entry.get("measured_at"):
        return None
    age = (time.time() if now is None else now) - float(entry["measured_at"])
    return entry if 0 <= age < PROBE_MAX_AGE_S else None


def cached_probe(file_path: str | Path, key: str) -> dict[str, Any] | None:
    """The cached measurement under ``key`` if still fresh."""
    return _fresh(_load_cache(file_path).get(key))


@functools.cache
def machine_load() -> str:
    """The CPUs this process may use and their 1-min load average per CPU, as a band ("2 cpus, busy").

    Sampled once per process, at the start-up's first call (``FinetuneScenario.prepare``), so ``plan``
    and the session after it key the cache by the load they started under, not by their own baseline's.
    """
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        per_cpu = os.getloadavg()[0] / max(1, cpus)
    except OSError:  # no load average on this platform
        return f"{cpus} cpus"
    band = next((name for bound, name in LOAD_BANDS if per_cpu < bound), "overloaded")
    return f"{cpus} cpus, {band}"


def _hardware_key(scenario: ScenarioInfo) -> str:
    gpus = [g.name for g in scenario.hardware.gpus] if scenario.hardware.gpus else []
    where = ",".join(gpus) if gpus else f"cpu, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '?')}"
    return f"{where}; {machine_load()}"


def train_key(scenario: ScenarioInfo, recipe: dict[str, Any]) -> str:
    """The cache key of a training probe: model, method, cutoff, batch, LoRA rank, hardware and load."""
    parts = [scenario.base_model, recipe.get("finetuning_type"), recipe.get("cutoff_len"),
             recipe.get("per_device_train_batch_size"), recipe.get("gradient_accumulation_steps"),
             recipe.get("lora_rank"), _hardware_key(scenario)]
    return "train:" + hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:16]


def eval_key(scenario: ScenarioInfo) -> str:
    """The cache key of an evaluation probe: model, benchmark, hardware and load."""
    parts = [scenario.base_model, scenario.benchmark, _hardware_key(scenario)]
    return "eval:" + hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def first_recipe(scenario: ScenarioInfo) -> dict[str, Any]:
    """The recipe loop 0 is expected to train (the heuristic planner's deterministic first plan)."""
    from ftagent.planners.heuristic.policy import base_recipe

    return base_recipe(scenario)


def train_plan(scenario: ScenarioInfo, recipe: dict[str, Any], rows: int | None = None) -> TrainPlan:
    """The recipe as steps: rows default to the data cap (``--upper-data-size-limit``)."""
    gpus = max(1, scenario.hardware.gpu_count)
    batch = int(recipe.get("per_device_train_batch_size") or 1) * int(recipe.get("gradient_accumulation_steps") or 1)
    return TrainPlan(method=str(recipe.get("finetuning_type") or "?"),
                     rows=int(rows or scenario.upper_data_size_limit),
                     epochs=recipe.get("num_train_epochs"), max_steps=recipe.get("max_steps"),
                     effective_batch=batch * gpus, cutoff_len=recipe.get("cutoff_len"))


# --- training probe ---------------------------------------------------------------------------------


class _ProbeContext:
    """The step context the data step and the validator get in the probe: no session; each step's own
    timeout capped by ``limit`` (a session's: what is left of ``--timeout``, issue 42 item 6)."""

    def __init__(self, emit: Callable[[_Event], None], limit: Callable[[float], float]) -> None:
        self.emit = emit
        self._limit = limit

    def limit(self, seconds: float) -> float:
        return self._limit(seconds)


def no_deadline(seconds: float) -> float:
    """The ``limit`` of a probe outside a session (``ftagent plan``): each step keeps its own timeout."""
    return seconds


def measure_training(scenario: ScenarioInfo, settings: Settings, runner: Runner, run: ResolvedRun, *,
                     limit: Callable[[float], float], recipe: dict[str, Any] | None = None,
                     use_cache: bool = True) -> tuple[TrainProbe, float]:
    """The measured training speed of ``recipe`` (default: the first recipe); returns (probe, seconds spent).

    ``limit`` caps each step's timeout (the session's deadline; :func:`no_deadline` for ``ftagent plan``)
    and may raise when no time is left.

    Raises:
        RuntimeError: the probe's validation failed (its failure summary is the message).
    """
    recipe = recipe or first_recipe(scenario)
    key = train_key(scenario, recipe)
    cached = cached_probe(settings.ft.file_path, key) if use_cache else None
    if cached:
        return TrainProbe(**cached), 0.0
    from ftagent.core.trace import Trace
    from ftagent.core.types import Hypothesis
    from ftagent.finetune.workflow import build_components
    from ftagent.tools.llamafactory.validator import LlamaFactoryValidator

    started = time.monotonic()
    work = forecast_dir(settings.ft.file_path) / f"probe_{os.getpid()}" / "loop_0"  # validate/ is beside it
    shutil.rmtree(work.parent, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        components = build_components(scenario, settings, runner, "heuristic", run=run)
        validator = components.validator
        assert isinstance(validator, LlamaFactoryValidator)  # its micro-batch defaults are what the probe tunes
        check_steps = int(validator.defaults.micro_batch.get("max_steps") or 3)  # the validator's own check
        batch = int(recipe.get("per_device_train_batch_size") or 1) * int(recipe.get("gradient_accumulation_steps") or 1)
        # a steadier s/step than the 3-step check: PROBE_STEPS steps, enough samples for them
        validator.defaults.micro_batch = {**validator.defaults.micro_batch, "max_steps": PROBE_STEPS,
                                          "max_samples": max(32, batch * PROBE_STEPS)}
        hypothesis = Hypothesis(reason="forecast probe", hypothesis="forecast probe", task="forecast probe",
                                planner="heuristic", plan={"recipe": recipe})
        trace = Trace()
        # a stand-in step context: emit and limit are all the probe's steps read (the heuristic coder none)
        ctx = cast("StepContext[FinetuneSessionState]", _ProbeContext(lambda _event: None, limit))
        code = components.coder.code(hypothesis, trace, work, None, ctx)
        t0 = time.monotonic()
        components.data.prepare(code, hypothesis, trace, ctx, debug=True)
        data_s = time.monotonic() - t0
        report = validator.validate(code, ctx)
        checks_s = time.monotonic() - t0 - data_s  # config checks + template check + micro-batch run
        if not report.passed:
            raise RuntimeError(report.failure.summary() if report.failure else "the probe's validation failed")
        state = json.loads((Path(report.micro_batch["output_dir"]) / "trainer_state.json").read_text(encoding="utf-8"))
    finally:
        shutil.rmtree(work.parent, ignore_errors=True)
    rows = [r for r in state.get("log_history", []) if isinstance(r, dict) and "train_runtime" in r]
    wall = float(report.micro_batch.get("duration_s") or 0.0)
    runtime = float(rows[-1]["train_runtime"]) if rows else wall
    steps = int(state.get("global_step") or PROBE_STEPS)
    s_per_step = runtime / max(1, steps)
    startup_s = max(0.0, wall - runtime)
    micro_s = startup_s + check_steps * s_per_step  # the validator's own 3-step run
    template_s = max(0.0, checks_s - wall)  # the template check (and config checks): loop 0 only
    probe = TrainProbe(key=key, s_per_step=round(s_per_step, 4), startup_s=round(startup_s, 2),
                       validate_s=round(data_s + template_s + micro_s, 2), revalidate_s=round(data_s + micro_s, 2),
                       steps=steps, measured_at=time.time(), load=machine_load())
    _store(settings.ft.file_path, key, probe.model_dump())
    return probe, time.monotonic() - started


# --- evaluation probe -------------------------------------------------------------------------------


def eval_probe_from_events(events: list[Any], key: str = "") -> EvalProbe | None:
    """The baseline's OpenCompass run read from its events (None when it did not run: e.g. cached).

    Fixed cost = the run's wall time minus the span of its inference progress; s/item = that span ÷ items.
    """
    items = [e if isinstance(e, dict) else e.model_dump() for e in events]
    runs = [e for e in items if e.get("type") == "run" and e.get("purpose") == "eval" and e.get("loop") is None]
    if not runs:
        return None
    wall = float(runs[-1]["duration_s"])
    infer = [e for e in items if e.get("type") == "progress" and str(e.get("phase", "")).startswith("infer:")
             and e.get("loop") is None]
    totals: dict[str, int] = {}
    for e in infer:
        if e.get("total"):
            totals[e["phase"]] = int(e["total"])
    n = sum(totals.values())
    span = (max(e["ts"] for e in infer) - min(e["ts"] for e in infer)) if infer else 0.0
    per_item = span / n if n else 0.0
    return EvalProbe(key=key, fixed_s=round(max(0.0, wall - span), 2), s_per_item=round(per_item, 5),
                     items=n, measured_at=time.time(), load=machine_load())


def evaluation_cost(settings: Settings, scenario: ScenarioInfo, events: list[Any]) -> EvalProbe | None:
    """The evaluation cost after the baseline: its run's events, else the cache, else the cached result's
    recorded wall time (a cached baseline has no events to split it by item)."""
    probe = eval_probe_from_events(events, eval_key(scenario))
    if probe is not None and probe.items:
        remember_eval(settings, scenario, probe)
        return probe
    probe = cached_eval(settings, scenario)
    if probe is not None:
        return probe
    base = scenario.baseline
    if base is not None and base.duration_s:
        return EvalProbe(key=eval_key(scenario), fixed_s=round(base.duration_s, 2), s_per_item=0.0, items=0,
                         measured_at=time.time(), source="cached baseline (its recorded wall time, not split by item)")
    return None


def cached_eval(settings: Settings, scenario: ScenarioInfo) -> EvalProbe | None:
    cached = cached_probe(settings.ft.file_path, eval_key(scenario))
    return EvalProbe(**cached) if cached else None


def remember_eval(settings: Settings, scenario: ScenarioInfo, probe: EvalProbe) -> None:
    _store(settings.ft.file_path, eval_key(scenario), probe.model_dump())


# --- LLM use ----------------------------------------------------------------------------------------


def llm_latency(settings: Settings, model: str | None, events: list[Any] | None = None) -> tuple[float, str]:
    """(seconds per planner call, where it comes from): the mean latency of this session's LLM calls so
    far (the dataset selection; cached for the next forecast), else the cached mean of an earlier one,
    else ``LLM_CALL_S``."""
    calls = [float(e.get("latency_s") or 0.0) for e in events or []
             if e.get("type") == "llm_call" and not e.get("error") and e.get("latency_s")]
    key = f"llm_latency:{model}"
    if calls:
        mean = sum(calls) / len(calls)
        _store(settings.ft.file_path, key, {"s_per_call": mean, "calls": len(calls), "measured_at": time.time()})
        return mean, f"measured: the mean of this session's {len(calls)} LLM call(s) so far"
    cached = _load_cache(settings.ft.file_path).get(key)
    if cached and cached.get("s_per_call"):
        return float(cached["s_per_call"]), f"measured in an earlier session ({cached.get('calls', '?')} call(s))"
    return LLM_CALL_S, "assumed (no call measured yet)"


def llm_forecast(settings: Settings, scenario: ScenarioInfo, planner: str, loop_n: int,
                 events: list[Any] | None = None) -> LLMForecast:
    """Calls, tokens and wall time of the planner (0 for the heuristic one); the price where LiteLLM knows it.

    Prompt tokens per call: the template's text plus the scenario brief every prompt quotes (plus the
    parameter catalogue for the config coder); completion tokens: ``COMPLETION_TOKENS`` per call; seconds
    per call: :func:`llm_latency`.
    """
    from ftagent.planners.registry import planner_spec

    if not planner_spec(planner).asks_llm:  # a declared capability, not the name
        return LLMForecast(model=None, calls=0, prompt_tokens=0, completion_tokens=0, cost_usd=0.0)
    from ftagent.llm.budget import count_tokens
    from ftagent.planners.llm.templates import PROMPTS_DIR

    model = settings.llm.chat_model
    brief = count_tokens(scenario.description_text or "")
    catalogue = count_tokens(scenario.parameter_catalogue or "")
    per_loop = calls = 0
    for names in LLM_PROMPTS.values():
        for name in names:
            path = PROMPTS_DIR / name
            text = path.read_text(encoding="utf-8") if path.is_file() else ""
            per_loop += count_tokens(text) + (catalogue if name == "config_coder.j2" else 0)
        calls += 1 if names[0].startswith("proposal") else len(names)
    per_loop += brief * calls
    prompt, completion = per_loop * loop_n, COMPLETION_TOKENS * calls * loop_n
    s_per_call, source = llm_latency(settings, model, events)
    return LLMForecast(model=model, calls=calls * loop_n, prompt_tokens=prompt, completion_tokens=completion,
                       cost_usd=_price(model, prompt, completion), s_per_call=round(s_per_call, 2), s_source=source)


def _price(model: str | None, prompt: int, completion: int) -> float | None:
    """USD from LiteLLM's price table; None when the model is not in it (unknown, never $0)."""
    if not model:
        return None
    try:
        import litellm

        info = litellm.model_cost.get(model) or litellm.model_cost.get(model.split("/", 1)[-1])
    except Exception:  # noqa: BLE001 - a missing price is "unknown", not an error
        return None
    if not info or info.get("input_cost_per_token") is None:
        return None
    return round(prompt * float(info["input_cost_per_token"])
                 + completion * float(info.get("output_cost_per_token") or 0.0), 4)


# --- the forecast -----------------------------------------------------------------------------------


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
    from ftagent.finetune.final import extra_items

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
    from ftagent.finetune.forgetting import guard_items
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
    from ftagent.core.stages import stage_spec
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
