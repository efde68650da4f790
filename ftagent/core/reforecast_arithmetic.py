"""The remaining time of a session, re-forecast from its own measured step times (issue 43; no I/O).

The first forecast (:mod:`ftagent.core.forecast_arithmetic`, made once after the baseline from probes) says what each
loop's parts should take. After every step the session knows more: how long its steps really took, and how
loaded the CPU was meanwhile (:mod:`ftagent.core.cpu_speed`'s slowness). :func:`reforecast` combines them:

* a step's measured time (from the previous step's end: what it adds to the session's wall time) is brought to
  an idle CPU (÷ the slowness it ran under) and so is the forecast's (÷ the slowness the probes ran under):
  their ratio is how far the forecast was off for that step, recent loops weighing more (x0.25 per loop back);
* every step still to run is the forecast's value for its loop × that ratio (the forecast keeps what it knows
  about later loops, e.g. the planner training twice as long) × the slowness **now**;
* a step measured but not forecast (the heuristic planner's propose, code, feedback: 0 s in the forecast) is its
  mean measured time; a step not measured yet takes the ratio of every step measured so far.

Only CPU-bound parts are scaled by the slowness (``cpu_parts``): LLM calls wait on a server, and a GPU session's
training and evaluation run on the GPU (its caller passes no CPU parts then). A failed step measures nothing
(a training that failed after 2 s says nothing about one that runs). :func:`predict_step` is the per-step rule.

A loop's training is priced by its own numbers once it has them (:mod:`ftagent.core.train_speed`): a training that
runs by its progress (its own total steps × its measured s/step), a validated one by its planned steps × this
session's measured s/step; such a training also counts, for the loops not started yet, as a measured training of
that length (the planner's choices so far are the best guess of its next ones). With K trials at once
(:class:`TrialNow` per trial in flight) what is left is not the sum of the loops: the loops still to start are
scheduled over the K slots after what is left of the running ones (:func:`ftagent.core.forecast_arithmetic.makespan`).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, Field

from ftagent.core.forecast_arithmetic import Forecast, LoopForecast, makespan
from ftagent.core.train_speed import SessionSpeed, TrainProgress, TrainRun

#: how a workflow's step maps to a part of :class:`LoopForecast`: (part, share of that part)
StepParts = Mapping[str, tuple[str, float]]
RECENCY = 0.25  # a loop's weight in the measured ratios: x0.25 per loop before the last measured one


class StepTime(BaseModel):
    """One finished step of the session, as the re-forecast reads it."""

    loop: int
    step: str
    seconds: float
    slowness: float = 1.0  # the CPU's slowness while it ran (1.0: an idle CPU)
    ok: bool = True  # failed steps are kept for the record but measure nothing
    train_steps: int | None = None  # a train step: its run's optimizer steps (its progress's total)
    s_per_step: float | None = None  # ... and their measured wall seconds per step (None: no progress came)


class TrialNow(BaseModel):
    """A trial (loop) in flight, as the re-forecast sees it."""

    loop: int
    step: str | None = None  # the step that runs now (None: between two steps)
    elapsed_s: float = 0.0  # how long that step has run
    after: list[str] = Field(default_factory=list)  # its steps after that one (between steps: all still to run)
    train: TrainProgress | None = None  # its training's progress (while its train step runs)
    planned_steps: int | None = None  # the optimizer steps its validated config plans (None: not validated)


class LoopLeft(BaseModel):
    loop: int
    seconds: float


class Reforecast(BaseModel):
    """What is left of the session, as re-forecast after a step (or on a running command's progress)."""

    made_at: float = Field(default_factory=time.time)
    remaining_s: float  # wall time: the running loops' rest and the loops to start over the slots, + the final eval
    current_s: float = 0.0  # what is left of the loop that runs (0 between loops; K at once: the longest)
    running: list[LoopLeft] = Field(default_factory=list)  # each loop in flight: what is left of it
    slots: int = 1  # trials at once (FT_PARALLEL_TRIALS)
    loops: list[LoopLeft] = Field(default_factory=list)  # each loop still to start (its own seconds)
    final_s: float = 0.0
    slowness: float = 1.0  # the CPU's slowness now
    forecast_slowness: float = 1.0  # the CPU's slowness when the first forecast's probes ran
    ratios: dict[str, float] = Field(default_factory=dict)  # per step: measured ÷ forecast, on an idle CPU
    first_remaining_s: float | None = None  # what the first forecast alone says is left (its own numbers)


def part_seconds(loop: LoopForecast, part: str) -> float:
    """``other`` (validate + data), ``train``, ``eval`` or ``llm`` seconds of one loop's forecast."""
    return float(getattr(loop, f"{part}_s", 0.0) or 0.0)


def forecast_step(forecast: Forecast, parts: StepParts, loop: int, step: str) -> float:
    """The first forecast's seconds for ``step`` in ``loop`` (a loop past its list: its last loop's)."""
    if step not in parts or not forecast.loops:
        return 0.0
    part, share = parts[step]
    return part_seconds(forecast.loops[min(loop, len(forecast.loops) - 1)], part) * share


class _Measured:
    """The session's measured steps, summed per (step, loop) on an idle CPU. ``projected``: (step, loop) -> idle
    seconds of a step not finished but priced by its own numbers (a validated or running training): it stands for
    a measurement of that step only (its own ratio), never for the other steps' (the overall ratio). ``slots``:
    loops run K at once, so the K newest loops are equally recent."""

    def __init__(self, times: Sequence[StepTime], parts: StepParts, cpu_parts: set[str],
                 projected: Mapping[tuple[str, int], float] | None = None, slots: int = 1) -> None:
        self.per_loop: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
        for t in times:
            if t.ok and t.seconds >= 0:
                scaled = parts.get(t.step, ("", 0.0))[0] in cpu_parts
                self.per_loop[t.step][t.loop] += t.seconds / (max(1.0, t.slowness) if scaled else 1.0)
        self.projected: dict[str, dict[int, float]] = defaultdict(dict)
        for (step, loop), seconds in (projected or {}).items():
            if loop not in self.per_loop.get(step, {}):
                self.projected[step][loop] = seconds
        self.last = max([t.loop for t in times] + [loop for _, loop in projected or {}], default=0)
        self.slots = max(1, slots)

    def weight(self, loop: int) -> float:
        """Recent loops count more (a quarter per round of K loops back): a slowness reading is not exactly
        proportional to a step's slowdown, so the loops measured at a load like today's predict today best."""
        return RECENCY ** (max(0, self.last - loop) // self.slots)

    def of_step(self, step: str) -> dict[int, float]:
        """``step``'s idle seconds per loop: measured, else projected."""
        return {**self.projected.get(step, {}), **self.per_loop.get(step, {})}


def _ratio(measured: _Measured, forecast: Forecast, parts: StepParts, step: str, forecast_slowness: float,
           cpu_parts: set[str]) -> float | None:
    """Σ measured ÷ Σ forecast of ``step`` over the loops it ran in (both on an idle CPU, recent loops weighing
    more); None: no such loop."""
    scale = forecast_slowness if parts.get(step, ("", 0.0))[0] in cpu_parts else 1.0
    spent = planned = 0.0
    for loop, seconds in measured.of_step(step).items():
        f = forecast_step(forecast, parts, loop, step) / max(1.0, scale)
        if f > 0:
            w = measured.weight(loop)
            spent, planned = spent + w * seconds, planned + w * f
    return spent / planned if planned > 0 else None


def _overall(measured: _Measured, forecast: Forecast, parts: StepParts, forecast_slowness: float,
             cpu_parts: set[str]) -> float:
    spent = planned = 0.0
    for step in measured.per_loop:
        scale = forecast_slowness if parts.get(step, ("", 0.0))[0] in cpu_parts else 1.0
        for loop, seconds in measured.per_loop[step].items():
            f = forecast_step(forecast, parts, loop, step) / max(1.0, scale)
            if f > 0:
                w = measured.weight(loop)
                spent, planned = spent + w * seconds, planned + w * f
    return spent / planned if planned > 0 else 1.0


def predict_step(forecast: Forecast, times: Sequence[StepTime], parts: StepParts, loop: int, step: str, *,
                 slowness: float, forecast_slowness: float, cpu_parts: set[str]) -> float:
    """Seconds ``step`` of ``loop`` is expected to take from now (see the module docstring)."""
    measured = _Measured(times, parts, cpu_parts)
    return _predict(measured, forecast, parts, loop, step, slowness, forecast_slowness, cpu_parts)


def _predict(measured: _Measured, forecast: Forecast, parts: StepParts, loop: int, step: str, slowness: float,
             forecast_slowness: float, cpu_parts: set[str]) -> float:
    scaled = parts.get(step, ("", 0.0))[0] in cpu_parts
    now = max(1.0, slowness) if scaled else 1.0
    planned = forecast_step(forecast, parts, loop, step) / (max(1.0, forecast_slowness) if scaled else 1.0)
    ratio = _ratio(measured, forecast, parts, step, forecast_slowness, cpu_parts)
    if planned > 0:
        if ratio is None:
            ratio = _overall(measured, forecast, parts, forecast_slowness, cpu_parts)
        return planned * ratio * now
    runs = measured.per_loop.get(step, {})
    if not runs:
        return 0.0
    weights = {loop: measured.weight(loop) for loop in runs}
    return sum(weights[loop] * seconds for loop, seconds in runs.items()) / sum(weights.values()) * now


class _Pricer:
    """Each step's seconds from now: :func:`_predict`, except a loop's training priced by its own numbers."""

    def __init__(self, forecast: Forecast, times: Sequence[StepTime], parts: StepParts, trials: Sequence[TrialNow],
                 slowness: float, forecast_slowness: float, cpu_parts: set[str], slots: int = 1) -> None:
        self.forecast, self.parts, self.cpu_parts = forecast, parts, cpu_parts
        self.slowness, self.forecast_slowness = slowness, forecast_slowness
        self.train_step = next((s for s, (part, _) in parts.items() if part == "train"), None)
        scaled = "train" in cpu_parts
        runs = [TrainRun(loop=t.loop, s_per_step=t.s_per_step, slowness=t.slowness, steps=t.train_steps,
                         wall_s=t.seconds) for t in times if t.ok and t.step == self.train_step and t.s_per_step]
        runs += [TrainRun(loop=tr.loop, s_per_step=tr.train.s_per_step, slowness=tr.train.slowness)
                 for tr in trials if tr.train is not None and tr.train.s_per_step > 0]
        self.speed = SessionSpeed(runs, scaled=scaled, slots=slots)
        probe, scale = forecast.train_probe, max(1.0, forecast_slowness) if scaled else 1.0
        self.probe = (probe.s_per_step / scale, probe.startup_s / scale) if probe is not None else None
        projected: dict[tuple[str, int], float] = {}
        for tr in trials:  # a validated or running training: a measured one of its length, for the loops after it
            idle = self.planned(self.own_steps(tr), 1.0)
            if idle is not None and self.train_step is not None:
                projected[(self.train_step, tr.loop)] = idle
        self.measured = _Measured(times, parts, cpu_parts, projected, slots)

    @staticmethod
    def own_steps(trial: TrialNow) -> int | None:
        return trial.train.total if trial.train is not None else trial.planned_steps

    def planned(self, steps: int | None, slowness: float) -> float | None:
        """A training of ``steps`` optimizer steps at ``slowness`` (None: no steps, or no speed known at all)."""
        if not steps:
            return None
        return self.speed.planned_s(steps, slowness=slowness, fallback=self.probe)

    def step(self, loop: int, step: str, trial: TrialNow | None = None) -> float:
        if trial is not None and step == self.train_step:
            own = self.planned(self.own_steps(trial), self.slowness)
            if own is not None:
                return own
        return _predict(self.measured, self.forecast, self.parts, loop, step, self.slowness, self.forecast_slowness,
                        self.cpu_parts)

    def trial_left(self, trial: TrialNow, now: float) -> float:
        """What is left of a trial in flight: its running step's rest and its later steps."""
        running = 0.0
        if trial.step is not None and trial.step == self.train_step and trial.train is not None:
            running = trial.train.left_s(now)
        elif trial.step is not None:
            running = max(0.0, self.step(trial.loop, trial.step, trial) - trial.elapsed_s)
        return running + sum(self.step(trial.loop, s, trial) for s in trial.after)

    def ratio(self, step: str) -> float | None:
        return _ratio(self.measured, self.forecast, self.parts, step, self.forecast_slowness, self.cpu_parts)


def reforecast(forecast: Forecast, times: Sequence[StepTime], parts: StepParts, *, steps: Sequence[str],
               loop_n: int, slowness: float, forecast_slowness: float, cpu_parts: set[str],
               trials: Sequence[TrialNow] | None = None, next_loop: int | None = None, slots: int = 1,
               current_loop: int = 0, steps_left: Sequence[str] = (), now: float | None = None,
               final_part: str = "eval") -> Reforecast:
    """What is left after the steps in ``times``: the rest of each trial in flight (``trials``), every loop from
    ``next_loop`` up to ``loop_n`` (each of ``steps``) scheduled over ``slots`` after them, and the final
    evaluation (scaled like ``final_part``). One loop at a time may name it instead: the rest of ``current_loop``
    (``steps_left``, no step running) and the loops after it."""
    if trials is None:
        trials = [TrialNow(loop=current_loop, after=list(steps_left))] if steps_left else []
        next_loop = current_loop + 1 if steps_left else current_loop
    first_new = next_loop if next_loop is not None else max((t.loop + 1 for t in trials), default=0)
    now = time.time() if now is None else now
    price = _Pricer(forecast, times, parts, trials, slowness, forecast_slowness, cpu_parts, slots)
    running = [LoopLeft(loop=t.loop, seconds=round(price.trial_left(t, now), 2)) for t in trials]
    loops = [LoopLeft(loop=i, seconds=round(sum(price.step(i, s) for s in steps), 2)) for i in range(first_new, loop_n)]
    ratios = {s: round(r, 3) for s in steps if (r := price.ratio(s)) is not None}
    final = 0.0
    if forecast.final_eval_s:
        eval_ratio = next((ratios[s] for s in steps if parts.get(s, ("", 0))[0] == final_part and s in ratios),
                          _overall(price.measured, forecast, parts, forecast_slowness, cpu_parts))
        scale = max(1.0, slowness) / max(1.0, forecast_slowness) if final_part in cpu_parts else 1.0
        final = forecast.final_eval_s * eval_ratio * scale

    def first(loop: int, step: str) -> float:
        return forecast_step(forecast, parts, loop, step)

    first_running = [(max(0.0, first(t.loop, t.step) - t.elapsed_s) if t.step else 0.0)
                     + sum(first(t.loop, s) for s in t.after) for t in trials]
    first_loops = [sum(first(i, s) for s in steps) for i in range(first_new, loop_n)]
    wall = makespan([lp.seconds for lp in loops], slots, busy=[lp.seconds for lp in running])
    return Reforecast(made_at=now, remaining_s=round(wall + final, 2),
                      current_s=round(max((lp.seconds for lp in running), default=0.0), 2), running=running,
                      slots=max(1, slots), loops=loops, final_s=round(final, 2), slowness=round(slowness, 3),
                      forecast_slowness=round(forecast_slowness, 3), ratios=ratios,
                      first_remaining_s=round(makespan(first_loops, slots, busy=first_running)
                                              + (forecast.final_eval_s or 0.0), 2))
