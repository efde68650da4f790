"""The forecast's probes: the session's first recipe measured for real, and the evaluation's cost read back.

* **Training**: the first recipe (the heuristic planner's deterministic plan; for the LLM planner the same
  default plan, stated as an assumption) goes through the real code → data (debug) → validate steps in a
  scratch workspace under ``FT_FILE_PATH/forecast/``; the validator's micro-batch run is lengthened to
  ``PROBE_STEPS`` so ``train_runtime ÷ steps`` is a steady s/step.
* **Evaluation**: the baseline OpenCompass run (both splits) read back from its events: the span of its
  inference progress gives s/item, the rest is its fixed cost (start-up + scoring).

Both are cached (:mod:`.probe_cache`), so a second forecast is instant.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ftagent.core.forecast_arithmetic import EvalProbe, TrainPlan, TrainProbe
from ftagent.finetune.probe_cache import (
    cached_eval,
    cached_probe,
    eval_key,
    forecast_dir,
    machine_load,
    remember_eval,
    store,
    train_key,
)

if TYPE_CHECKING:
    from ftagent.core.settings import Settings
    from ftagent.core.types import ScenarioInfo
    from ftagent.engine.events import _Event
    from ftagent.engine.loop import StepContext
    from ftagent.finetune.resolve import ResolvedRun
    from ftagent.finetune.state import FinetuneSessionState
    from ftagent.runners.base import Runner

PROBE_STEPS = 10  # micro-batch steps of the probe (the validator's own check runs 3)


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
    from ftagent.finetune.components import build_components
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
    store(settings.ft.file_path, key, probe.model_dump())
    return probe, time.monotonic() - started


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
