"""A training's own speed, as its progress shows it, and the session's measured seconds per step (issue 43; no I/O).

The first forecast prices a loop's training from the probe's recipe (loop 0's plan, e.g. 300 steps). The planner
may train another length: in a real session it chose 7,500 optimizer steps, and a re-forecast that priced 300
said "0 s more" while each training had 20 minutes to go. So, once a loop's config is validated and once its
training runs, its own numbers replace the probe's:

* a training that runs: its trainer's progress (``current_steps``/``total_steps`` of LLaMA-Factory's
  ``trainer_log.jsonl``, the ``progress`` events) gives its own total and its measured seconds per step —
  :class:`TrainProgress`, what is left = steps left × the recent seconds per step;
* a training validated but not started: its planned optimizer steps (the validated train.yaml's ``max_steps``, or
  epochs × ceil(rows ÷ global batch)) × this session's measured seconds per step on an idle CPU × the slowness
  now, plus the measured fixed part of a train step (the full data run, the trainer's start-up and save) —
  :class:`SessionSpeed`.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel

RATE_WINDOW_S = 300.0  # the recent rate of a running training: its progress points of the last 5 minutes
RECENCY = 0.25  # a loop's weight in the session's speed: x0.25 per loop before the newest (as core.reforecast_arithmetic)


class TrainProgress(BaseModel):
    """A running training, from its progress events."""

    loop: int
    done: int  # optimizer steps done at ``at``
    total: int  # the run's own total (its trainer's max_steps)
    s_per_step: float  # measured wall seconds per optimizer step (recent)
    at: float  # when the latest point was read (epoch seconds)
    slowness: float = 1.0  # the CPU's slowness while those steps ran

    def left_s(self, now: float) -> float:
        """Seconds left of the run's steps at ``now`` (the latest point's rest, less the time since it)."""
        return max(0.0, (self.total - self.done) * self.s_per_step - max(0.0, now - self.at))


def s_per_step(points: Sequence[tuple[float, int]], *, window_s: float = RATE_WINDOW_S,
               eta_s: float | None = None, total: int | None = None) -> float | None:
    """Wall seconds per optimizer step from ``(time, steps done)`` points of one run: over the points of the last
    ``window_s`` (at least two points), else — one point only — the trainer's own ETA ÷ the steps left
    (LLaMA-Factory's ``remaining_time`` is its whole run's mean s/step × steps left,
    ``llamafactory/train/callbacks.py:LogCallback._timing``). None: nothing to measure yet."""
    pts = sorted(points)
    if len(pts) >= 2:
        last_t, last_done = pts[-1]
        recent = [p for p in pts[:-1] if last_t - p[0] <= window_s] or [pts[-2]]
        first_t, first_done = recent[0]
        if last_done > first_done and last_t > first_t:
            return (last_t - first_t) / (last_done - first_done)
    if pts and eta_s is not None and total and total > pts[-1][1]:
        return eta_s / (total - pts[-1][1])
    return None


class TrainRun(BaseModel):
    """One training of this session as the session's speed reads it: finished, or running."""

    loop: int
    s_per_step: float
    slowness: float = 1.0
    steps: int | None = None  # its total optimizer steps (a finished one's fixed part = wall - steps x s/step)
    wall_s: float | None = None  # the whole train step's wall time (finished ones only)


class SessionSpeed:
    """This session's measured training speed on an idle CPU (``scaled``: the CPU's slowness scales training;
    False on a GPU), recent loops weighing most (the K newest alike: ``slots`` trials run at once)."""

    def __init__(self, runs: Sequence[TrainRun], *, scaled: bool, slots: int = 1) -> None:
        self.runs, self.scaled, self.slots = list(runs), scaled, max(1, slots)
        self.last = max((r.loop for r in self.runs), default=0)

    def _idle(self, seconds: float, slowness: float) -> float:
        return seconds / max(1.0, slowness) if self.scaled else seconds

    def _mean(self, values: list[tuple[int, float]]) -> float | None:
        weights = [(RECENCY ** (max(0, self.last - loop) // self.slots), v) for loop, v in values]
        total = sum(w for w, _ in weights)
        return sum(w * v for w, v in weights) / total if total > 0 else None

    def s_per_step(self) -> float | None:
        """Seconds per optimizer step on an idle CPU (None: no training measured yet)."""
        return self._mean([(r.loop, self._idle(r.s_per_step, r.slowness)) for r in self.runs if r.s_per_step > 0])

    def fixed_s(self) -> float | None:
        """A train step's seconds outside its optimizer steps, on an idle CPU (the full data run, the trainer's
        start-up and save), from the finished trainings (None: none finished)."""
        return self._mean([(r.loop, self._idle(max(0.0, r.wall_s - r.steps * r.s_per_step), r.slowness))
                           for r in self.runs if r.wall_s is not None and r.steps])

    def planned_s(self, steps: int, *, slowness: float, fallback: tuple[float, float] | None) -> float | None:
        """A validated training of ``steps`` optimizer steps, at the slowness now: the fixed part + steps × s/step
        (``fallback``: the probe's (s/step, start-up) on an idle CPU, until this session measured its own; None:
        neither is known)."""
        rate, fixed = self.s_per_step(), self.fixed_s()
        if rate is None and fallback is None:
            return None
        if rate is None:
            rate = fallback[0] if fallback is not None else 0.0
        if fixed is None:
            fixed = fallback[1] if fallback is not None else 0.0
        return (fixed + steps * rate) * (max(1.0, slowness) if self.scaled else 1.0)
