"""What a session will cost before it runs: the typed forecast and its arithmetic (no I/O).

The numbers come from measurements (:mod:`ftagent.finetune.probes` runs the probes): a short real
LLaMA-Factory run gives seconds per optimizer step and the fixed start-up of a training run; a real
OpenCompass run gives its fixed cost and the cost per item. Here they are only scaled:

* training: ``start-up + steps × s/step``, steps = ``max_steps`` or ``ceil(rows × epochs ÷ effective batch)``;
* evaluation: ``fixed + items × s/item``;
* other (validate + data): the measured validate step of the probe.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from pydantic import BaseModel, Field

from ftagent.core.durations import format_duration

#: The 1-min load average per CPU of each load band (lower, upper bound): ``ftagent.finetune.probe_cache``
#: keys its probe cache by these bands and records the band in :attr:`TrainProbe.load`.
LOAD_BANDS: dict[str, tuple[float, float]] = {"idle": (0.0, 0.5), "busy": (0.5, 1.0), "loaded": (1.0, 2.0),
                                               "overloaded": (2.0, 3.0)}  # above 3 per CPU: read as 3


def band_of(load: str) -> str | None:
    """The band of a recorded load (``"2 cpus, busy"`` → ``"busy"``; None when none was recorded)."""
    band = load.rsplit(",", 1)[-1].strip() if "," in load else ""
    return band if band in LOAD_BANDS else None


class TrainProbe(BaseModel):
    """A measured training speed for one (model, method, cutoff, batch, hardware)."""

    key: str
    s_per_step: float  # trainer_state's train_runtime ÷ its optimizer steps
    startup_s: float  # the run's wall time minus train_runtime (imports, model load, save)
    validate_s: float  # loop 0's validate step: data debug + template check + the 3-step micro-batch run
    revalidate_s: float | None = None  # a later loop's: the validator keeps its template check for the session
    steps: int
    measured_at: float = 0.0
    load: str = ""  # the machine's CPUs and load band the measurement was made under ("2 cpus, busy")

    def s_per_step_range(self) -> tuple[float, float]:
        """The step time to expect while the load stays in the band it was measured in (issue 35: one
        falsely precise number). The probe runs once, on a machine whose other processes share the CPUs: a
        single-threaded step under a per-CPU load L takes about (1 + L) times its unshared time, and L was
        somewhere in the band [lo, hi), so the same band allows ``s × (1 + lo) / (1 + hi)`` to
        ``s × (1 + hi) / (1 + lo)``. Without a recorded band, the widest band's spread."""
        band = band_of(self.load)
        lo, hi = LOAD_BANDS[band] if band else (0.0, max(b for _, b in LOAD_BANDS.values()))
        return self.s_per_step * (1 + lo) / (1 + hi), self.s_per_step * (1 + hi) / (1 + lo)


class EvalProbe(BaseModel):
    """A measured OpenCompass run of the base model on both splits."""

    key: str
    fixed_s: float  # wall time not spent on items (start-up before the first item, scoring after)
    s_per_item: float
    items: int
    measured_at: float = 0.0
    load: str = ""
    source: str = "baseline run"  # or "cached baseline (its recorded wall time, not split by item)"


class TrainPlan(BaseModel):
    """What the forecast assumes a loop trains."""

    method: str = "?"
    rows: int = 0
    epochs: float | None = None
    max_steps: int | None = None
    effective_batch: int = 1
    cutoff_len: int | None = None

    @property
    def steps(self) -> int:
        """Optimizer steps of the plan (``max_steps`` wins, as in transformers)."""
        if self.max_steps:
            return int(self.max_steps)
        return max(1, math.ceil(self.rows * float(self.epochs or 1.0) / max(1, self.effective_batch)))

    def steps_per_epoch(self) -> int:
        return max(1, math.ceil(self.rows / max(1, self.effective_batch)))


class LoopForecast(BaseModel):
    """Seconds one loop is expected to take, by part."""

    loop: int
    train_s: float
    eval_s: float
    other_s: float  # validate (data debug, template check, micro-batch) + data processing
    llm_s: float = 0.0  # the planner's LLM calls (proposal, coders, feedback): LLMForecast.s_per_call each

    @property
    def total_s(self) -> float:
        return self.train_s + self.eval_s + self.other_s + self.llm_s

    def steps(self) -> dict[str, float]:
        """As the step-times table names the workflow steps."""
        return {"validate": self.other_s, "train": self.train_s, "evaluate": self.eval_s}


class LLMForecast(BaseModel):
    """The planner's expected LLM use; ``cost_usd`` None = LiteLLM has no price (unknown, never $0)."""

    model: str | None = None
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = 0.0
    s_per_call: float = 0.0  # wall seconds of one call (issue 35: an LLM-planned session's forecast had none)
    s_source: str = ""  # where s_per_call comes from: measured in this session, cached, or assumed

    @property
    def seconds(self) -> float:
        return self.calls * self.s_per_call


class Forecast(BaseModel):
    """A session's forecast: per loop, the baseline, the memory plan, LLM use, the total and the fit."""

    planner: str
    loops: list[LoopForecast]
    baseline_eval_s: float | None = None  # None: the baseline is already measured (the session has run it)
    final_eval_s: float | None = None  # FT_FINAL_EVAL=full: base + best on the items beyond test (None: no run)
    final_items: int = 0  # the final evaluation's items per model
    plan: TrainPlan
    s_per_epoch: float | None = None  # training seconds for one epoch of the planned rows (start-up excluded)
    memory: str = ""
    llm: LLMForecast = Field(default_factory=LLMForecast)
    timeout_s: float | None = None
    assumptions: list[str] = Field(default_factory=list)
    train_probe: TrainProbe | None = None
    eval_probe: EvalProbe | None = None
    probe_cost_s: float = 0.0  # wall time this forecast spent measuring (0 when every number was cached)
    made_at: float = Field(default_factory=time.time)  # a cached probe's age = made_at - its measured_at
    cpu_slowness: float | None = None  # the CPU's slowness while the session made it (core.cpu_speed; issue 43)
    slots: int = 1  # trials at once (FT_PARALLEL_TRIALS): the loops' wall time is their schedule over the slots

    @property
    def loops_wall_s(self) -> float:
        """The loops' wall time: one after another on one slot, else their schedule over the slots (:func:`makespan`)."""
        return makespan([lp.total_s for lp in self.loops], self.slots)

    @property
    def total_s(self) -> float:
        return (self.baseline_eval_s or 0.0) + self.loops_wall_s + (self.final_eval_s or 0.0)

    @property
    def fits_timeout(self) -> bool | None:
        """None without ``--timeout``."""
        return None if self.timeout_s is None else self.total_s <= self.timeout_s

    def loop_share_s(self) -> float | None:
        """Each loop's share of what ``--timeout`` leaves after the baseline (None without one); with K slots
        a loop runs beside K − 1 others, so its share is K times as long."""
        if self.timeout_s is None or not self.loops:
            return None
        return max(0.0, self.timeout_s - (self.baseline_eval_s or 0.0)) * max(1, self.slots) / len(self.loops)


def makespan(durations: Sequence[float], slots: int, busy: Sequence[float] = ()) -> float:
    """Wall time of trials started in order, each on the slot that frees first (the scheduler's rule).

    ``busy``: what is left of the trials already running, each holding a slot until then (a re-forecast with K
    trials at once, issue 43): the new trials wait for those slots. More running trials than slots (a session
    resumed with fewer) run first, on the slots that free first."""
    free = [0.0] * max(1, slots)
    for d in [*busy, *durations]:
        i = free.index(min(free))
        free[i] += max(0.0, d)
    return max(free) if durations or busy else 0.0


def what_would_fit(f: Forecast) -> str | None:
    """When the forecast does not fit ``--timeout``: how many loops would, and what timeout all of them need
    (whole minutes, rounded up). None when it fits or there is no timeout."""
    if f.fits_timeout is not False or f.timeout_s is None:
        return None
    fixed, fitting = (f.baseline_eval_s or 0.0) + (f.final_eval_s or 0.0), 0
    spent = fixed
    for n in range(1, len(f.loops) + 1):
        wall = fixed + makespan([lp.total_s for lp in f.loops[:n]], f.slots)
        if wall > f.timeout_s:
            break
        spent, fitting = wall, n
    need = format_duration(math.ceil(f.total_s / 60.0) * 60.0)
    loops = len(f.loops)
    if fitting:
        return (f"--loop-n {fitting} would fit in {format_duration(f.timeout_s)}, or --timeout {need} for "
                f"{loops} loop{'s' if loops > 1 else ''}")
    one = format_duration(math.ceil((spent + (f.loops[0].total_s if f.loops else 0.0)) / 60.0) * 60.0)
    return f"not even one loop fits in {format_duration(f.timeout_s)}: --timeout {one} for 1 loop, {need} for {loops}"


def train_seconds(probe: TrainProbe, plan: TrainPlan) -> float:
    """Wall seconds of a training run: its start-up plus the plan's steps at the measured speed."""
    return probe.startup_s + plan.steps * probe.s_per_step


def eval_seconds(probe: EvalProbe, items: int | None = None) -> float:
    """Wall seconds of one OpenCompass run over ``items`` (default: the probe's own item count)."""
    return probe.fixed_s + (probe.items if items is None else items) * probe.s_per_item


def grown(plan: TrainPlan, factor: float, cap: int | None = None) -> TrainPlan:
    """``plan`` trained ``factor`` times as long (``max_steps`` capped at ``cap``, epochs at 10)."""
    if plan.max_steps:
        steps = round(plan.max_steps * factor)
        return plan.model_copy(update={"max_steps": int(min(cap, steps) if cap else steps)})
    return plan.model_copy(update={"epochs": round(min(10.0, float(plan.epochs or 1.0) * factor), 2)})


def build_forecast(*, planner: str, loop_n: int, plan: TrainPlan, train: TrainProbe, evaluation: EvalProbe,
                   data_s: float = 0.0, baseline_needed: bool = True, memory: str = "",
                   llm: LLMForecast | None = None, timeout_s: float | None = None,
                   assumptions: list[str] | None = None, probe_cost_s: float = 0.0,
                   growth: float = 1.0, max_steps_cap: int | None = None, final_items: int = 0,
                   guard_items: list[int] | None = None, slots: int = 1, train_scale: float = 1.0) -> Forecast:
    """Loop 0 as ``plan``; loop i trains ``growth ** i`` as long (1.0: every loop like loop 0).

    ``final_items``: the final evaluation's items per model (0: it runs nothing): two runs, the base
    model's and the best model's (evaluation time per item × items, plus each run's fixed cost).
    ``guard_items``: the forgetting guard's items per guard benchmark (``FT_GUARD_BENCHMARKS``): one run
    each per loop for the candidate, and in loop 0 one more each for the base model — an upper bound,
    since only a candidate that would become SOTA is scored and the base's scores may be cached.
    ``slots``: trials at once (their wall time is their schedule over the slots); ``train_scale``: a trial's
    training time on its slot over the probe's (a slot with fewer GPUs than the probe had trains slower)."""
    guard_s = sum(eval_seconds(evaluation, n) for n in guard_items or [])
    eval_s = eval_seconds(evaluation)
    llm_s = (llm.seconds / max(1, loop_n)) if llm is not None else 0.0  # the calls are spread over the loops
    loops = []
    for i in range(max(1, loop_n)):
        train_s = train_scale * train_seconds(train, grown(plan, growth ** i, max_steps_cap) if i else plan)
        validate_s = train.validate_s if i == 0 or train.revalidate_s is None else train.revalidate_s
        loop_eval_s = eval_s + guard_s * (2 if i == 0 else 1)
        loops.append(LoopForecast(loop=i, train_s=round(train_s, 2), eval_s=round(loop_eval_s, 2),
                                  other_s=round(validate_s + data_s, 2), llm_s=round(llm_s, 2)))
    return Forecast(planner=planner, loops=loops, baseline_eval_s=round(eval_s, 2) if baseline_needed else None,
                    plan=plan, s_per_epoch=round(plan.steps_per_epoch() * train.s_per_step, 2), memory=memory,
                    llm=llm or LLMForecast(), timeout_s=timeout_s, assumptions=list(assumptions or []),
                    train_probe=train, eval_probe=evaluation, probe_cost_s=round(probe_cost_s, 2),
                    final_eval_s=round(2 * eval_seconds(evaluation, final_items), 2) if final_items else None,
                    final_items=final_items, slots=max(1, slots))


def percent_error(forecast_s: float | None, actual_s: float | None) -> float | None:
    """``(forecast − actual) ÷ actual`` in percent (None when either is missing or actual is 0)."""
    if forecast_s is None or not actual_s:
        return None
    return 100.0 * (forecast_s - actual_s) / actual_s
