"""The remaining time of a session, re-forecast from its own measured step times (issue 43; no I/O).

The first forecast (:mod:`ftagent.core.forecast`, made once after the baseline from probes) says what each
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
(a training that failed after 2 s says nothing about one that runs). :func:`predict_step` is the per-step rule,
so a session that runs several trials at once can sum it per trial.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, Field

from ftagent.core.forecast import Forecast, LoopForecast

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


class LoopLeft(BaseModel):
    loop: int
    seconds: float


class Reforecast(BaseModel):
    """What is left of the session, as re-forecast after a step."""

    made_at: float = Field(default_factory=time.time)
    remaining_s: float  # the current loop's rest + the loops after it + the final evaluation
    current_s: float = 0.0  # what is left of the loop that runs (0 between loops)
    loops: list[LoopLeft] = Field(default_factory=list)  # each loop still to start
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
    """The session's measured steps, summed per (step, loop) on an idle CPU."""

    def __init__(self, times: Sequence[StepTime], parts: StepParts, cpu_parts: set[str]) -> None:
        self.per_loop: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
        for t in times:
            if t.ok and t.seconds >= 0:
                scaled = parts.get(t.step, ("", 0.0))[0] in cpu_parts
                self.per_loop[t.step][t.loop] += t.seconds / (max(1.0, t.slowness) if scaled else 1.0)
        self.last = max((t.loop for t in times), default=0)

    def weight(self, loop: int) -> float:
        """Recent loops count more (a quarter per loop back): a slowness reading is not exactly proportional to a
        step's slowdown, so the loops measured at a load like today's predict today best."""
        return RECENCY ** max(0, self.last - loop)


def _ratio(measured: _Measured, forecast: Forecast, parts: StepParts, step: str, forecast_slowness: float,
           cpu_parts: set[str]) -> float | None:
    """Σ measured ÷ Σ forecast of ``step`` over the loops it ran in (both on an idle CPU, recent loops weighing
    more); None: no such loop."""
    scale = forecast_slowness if parts.get(step, ("", 0.0))[0] in cpu_parts else 1.0
    spent = planned = 0.0
    for loop, seconds in measured.per_loop.get(step, {}).items():
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


def reforecast(forecast: Forecast, times: Sequence[StepTime], parts: StepParts, *, steps: Sequence[str],
               loop_n: int, current_loop: int, steps_left: Sequence[str], slowness: float,
               forecast_slowness: float, cpu_parts: set[str], final_part: str = "eval") -> Reforecast:
    """What is left after the steps in ``times``: the rest of ``current_loop`` (``steps_left``), every loop
    after it up to ``loop_n`` (each of ``steps``), and the final evaluation (scaled like ``final_part``)."""
    measured = _Measured(times, parts, cpu_parts)

    def predict(loop: int, step: str) -> float:
        return _predict(measured, forecast, parts, loop, step, slowness, forecast_slowness, cpu_parts)

    current = sum(predict(current_loop, s) for s in steps_left)
    first_later = current_loop + 1 if steps_left else current_loop
    loops = [LoopLeft(loop=i, seconds=round(sum(predict(i, s) for s in steps), 2)) for i in range(first_later, loop_n)]
    ratios = {s: round(r, 3) for s in steps
              if (r := _ratio(measured, forecast, parts, s, forecast_slowness, cpu_parts)) is not None}
    final = 0.0
    if forecast.final_eval_s:
        eval_ratio = next((ratios[s] for s in steps if parts.get(s, ("", 0))[0] == final_part and s in ratios),
                          _overall(measured, forecast, parts, forecast_slowness, cpu_parts))
        scale = max(1.0, slowness) / max(1.0, forecast_slowness) if final_part in cpu_parts else 1.0
        final = forecast.final_eval_s * eval_ratio * scale
    first = sum(forecast_step(forecast, parts, current_loop, s) for s in steps_left) + sum(
        forecast_step(forecast, parts, i, s) for i in range(first_later, loop_n) for s in steps) + (
        forecast.final_eval_s or 0.0)
    return Reforecast(remaining_s=round(current + sum(lp.seconds for lp in loops) + final, 2),
                      current_s=round(current, 2), loops=loops, final_s=round(final, 2),
                      slowness=round(slowness, 3), forecast_slowness=round(forecast_slowness, 3), ratios=ratios,
                      first_remaining_s=round(first, 2))
