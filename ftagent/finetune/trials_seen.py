"""The loops in flight as the session's events show them, for the re-forecast (issue 43).

With K trials at once (issue 41) several loops run at the same time and their events interleave: what one loop's
``step_end`` measures must be timed from *that* loop's ``step_start`` and previous ``step_end``, and what is left of
the session depends on where *each* running loop is. :class:`TrialsSeen` keeps, per loop in flight: the step that
runs and since when, the steps after it, its validated training's planned optimizer steps (the ``validation``
event's ``planned_steps``) and its training's progress points (``progress`` events of phase ``train``:
LLaMA-Factory's ``current_steps``/``total_steps``). It is fed every event under the re-forecaster's lock.

:func:`validated_steps` is the workflow's side: the optimizer steps a validated train.yaml plans.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ftagent.core.reforecast_arithmetic import StepTime, TrialNow
from ftagent.core.train_speed import RATE_WINDOW_S, TrainProgress, s_per_step

if TYPE_CHECKING:
    from ftagent.core.cpu_speed import CpuSpeedMonitor
    from ftagent.core.types import ScenarioInfo, ValidationReport

TRAIN_PHASE = "train"  # the trainer's progress events (tools.llamafactory.trainer, tools.trl)


@dataclass
class _Trial:
    loop: int
    after: list[str]  # the steps after the running one (between steps: every step still to run)
    step: str | None = None  # running now
    started: float | None = None  # its step_start
    last_end: float | None = None  # this loop's previous step_end
    planned_steps: int | None = None  # the validated config's optimizer steps
    points: list[tuple[float, int]] = field(default_factory=list)  # (time, steps done) of the running training
    total: int | None = None
    eta_s: float | None = None


class TrialsSeen:
    """Where each loop in flight is (see the module); ``highest``: the highest loop started so far (-1: none)."""

    def __init__(self, steps: list[str], feedback_step: str, train_step: str, monitor: CpuSpeedMonitor,
                 *, highest: int = -1) -> None:
        self.steps, self.feedback_step, self.train_step = steps, feedback_step, train_step
        self.monitor, self.highest = monitor, highest
        self.trials: dict[int, _Trial] = {}

    def _trial(self, loop: int, first: str | None = None) -> _Trial:
        if loop not in self.trials:
            self.trials[loop] = _Trial(loop=loop, after=self._from(first or self.steps[0]))
            self.highest = max(self.highest, loop)
        return self.trials[loop]

    def _from(self, step: str) -> list[str]:
        return self.steps[self.steps.index(step):] if step in self.steps else []

    def see(self, event: Any) -> StepTime | None:
        """Follow ``event``; a loop's ``step_end`` returns that step's measured time."""
        kind, loop = getattr(event, "type", None), getattr(event, "loop", None)
        if loop is None:
            return None
        if kind == "trial_start":
            self._trial(loop, event.step)
        elif kind == "step_start":
            t = self._trial(loop, event.step)
            t.step, t.started, t.after = event.step, event.ts, self._from(event.step)[1:]
            if event.step == self.train_step:
                t.points, t.total, t.eta_s = [], None, None
        elif kind == "validation" and loop in self.trials:
            self.trials[loop].planned_steps = getattr(event, "planned_steps", None) if event.passed else None
        elif kind == "progress" and event.phase == TRAIN_PHASE and loop in self.trials:
            self._progress(self.trials[loop], event)
        elif kind == "step_end":
            return self._end(self._trial(loop, event.step), event)
        elif kind == "loop_end":
            self.trials.pop(loop, None)
        return None

    def _progress(self, t: _Trial, event: Any) -> None:
        if t.step != self.train_step or event.done is None or not event.total:
            return
        t.points.append((event.ts, int(event.done)))
        t.total, t.eta_s = int(event.total), (event.detail or {}).get("eta_s")

    def _end(self, t: _Trial, event: Any) -> StepTime:
        start = t.started if t.started is not None else event.ts - event.duration_s
        slowness = self.monitor.slowness(start, event.ts) or self.monitor.now()
        # the wall time the step added to its loop: its run plus the snapshot and events since the loop's last step
        seconds = max(event.duration_s, event.ts - t.last_end) if t.last_end is not None else event.duration_s
        rate = (s_per_step(t.points, window_s=float("inf"), eta_s=t.eta_s, total=t.total)
                if event.step == self.train_step else None)
        step = StepTime(loop=t.loop, step=event.step, seconds=round(seconds, 3), slowness=round(slowness, 3),
                        ok=event.status != "failed", train_steps=t.total if rate else None,
                        s_per_step=round(rate, 5) if rate else None)
        t.last_end, t.step, t.started = event.ts, None, None
        if event.step == self.feedback_step:
            self.trials.pop(t.loop, None)  # the loop is done (its loop_end follows)
        elif event.status == "failed":
            t.after = [self.feedback_step]
        else:
            target = event.goto or (self.steps[self.steps.index(event.step) + 1] if event.step in self.steps[:-1]
                                    else None)
            t.after = self._from(target) if target else []
        return step

    def in_flight(self, now: float) -> list[TrialNow]:
        """Each loop in flight at ``now``, as :func:`ftagent.core.reforecast_arithmetic.reforecast` reads it."""
        out = []
        for t in sorted(self.trials.values(), key=lambda x: x.loop):
            train = self._train(t) if t.step == self.train_step else None
            out.append(TrialNow(loop=t.loop, step=t.step, elapsed_s=max(0.0, now - t.started) if t.started else 0.0,
                                after=list(t.after), train=train, planned_steps=t.planned_steps))
        return out

    def _train(self, t: _Trial) -> TrainProgress | None:
        rate = s_per_step(t.points, eta_s=t.eta_s, total=t.total)
        if rate is None or not t.points or not t.total:
            return None
        at, done = t.points[-1]
        window = [p[0] for p in t.points if at - p[0] <= RATE_WINDOW_S] or [at]
        slowness = self.monitor.slowness(min(window), at) or self.monitor.now()
        return TrainProgress(loop=t.loop, done=done, total=t.total, s_per_step=rate, at=at, slowness=slowness)


def validated_steps(report: ValidationReport, scenario: ScenarioInfo, ctx: Any) -> int | None:
    """The optimizer steps a passed validation's train.yaml plans on the loop's GPUs (its slot's, K trials at once):
    ``max_steps``, or epochs × ceil(rows ÷ global batch) (``ftagent.tools.llamafactory.config.estimate_total_steps``,
    the warm-up's own count) with rows = the data cap (``--upper-data-size-limit``: the full data run has not run
    yet, so an epoch-based plan is an upper bound until the training's progress gives its own total). None: not
    passed, or no config to read."""
    from ftagent.core.errors import UserInputError
    from ftagent.core.untrusted import UnsafeEntry, read_text
    from ftagent.core.yamlio import load_yaml_text
    from ftagent.tools.llamafactory.config import estimate_total_steps

    if not report.passed:
        return None
    gpus = getattr(getattr(ctx, "slot", None), "gpus", None)
    devices = len(gpus) if gpus else scenario.hardware.gpu_count
    path = report.approved.config_path if report.approved is not None else (
        Path(report.config_path) if report.config_path else None)
    if path is None:
        return None
    try:
        config = load_yaml_text(read_text(path.parent, path.name, limit=4 << 20), "train.yaml")
        return estimate_total_steps(config, int(scenario.upper_data_size_limit), max(1, devices)) \
            if isinstance(config, dict) else None
    except (OSError, UnsafeEntry, UserInputError, ValueError, TypeError):  # a plug-in's odd config
        return None
