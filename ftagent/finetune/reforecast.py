"""The forecast follows the machine (issue 43): after every step the rest of the session is re-forecast.

Before: the forecast was made once, after the baseline, from probes; on a machine whose load rose from 1 to
30 the demo forecast 9 min 17 s and took 33 min 41 s (−72 %) and nothing said so while it ran.

:class:`Reforecaster` subscribes to the session's event log. On each ``step_end`` it records the step's
measured time and the CPU slowness meanwhile (:class:`ftagent.core.cpu_speed.CpuSpeedMonitor`, sampled every
5 s), re-forecasts what is left (:func:`ftagent.core.reforecast.reforecast`: the first forecast calibrated by
this session's measured steps, at the slowness now) and emits a ``reforecast`` event — the console prints it,
the UI and ``status --json`` show the latest, the report compares each loop with the last re-forecast made
before it started. :meth:`Reforecaster.loop_guard` is the engine's ``--timeout`` rule: a loop whose
re-forecast does not fit in the time left is not started.

A resumed session reads its earlier step times back from its ``reforecast`` events. On a GPU the training and
evaluation do not run on the CPU, so the slowness scales nothing there (measured step times only).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ftagent.core.durations import format_duration
from ftagent.core.forecast import Forecast
from ftagent.core.reforecast import Reforecast, StepTime, reforecast
from ftagent.engine.events import ReforecastEvent, read_events

if TYPE_CHECKING:
    from ftagent.core.cpu_speed import CpuSpeedMonitor
    from ftagent.engine.loop import StepContext
    from ftagent.engine.session import Session
    from ftagent.finetune.state import FinetuneSessionState

#: the fine-tuning workflow's steps as parts of the forecast (core.forecast.LoopForecast): validate is the
#: forecast's "validate + data", the planner's LLM time is spread over its calls (1 proposal, 2 coders, 1 feedback)
STEP_PARTS: dict[str, tuple[str, float]] = {"propose": ("llm", 0.25), "code": ("llm", 0.5),
                                            "validate": ("other", 1.0), "train": ("train", 1.0),
                                            "evaluate": ("eval", 1.0), "feedback": ("llm", 0.25)}
CPU_PARTS = {"other", "train", "eval"}  # what a busier CPU slows (the LLM waits on a server)


class Reforecaster:
    """Re-forecasts after every step of a session and answers whether the next loop fits (see the module)."""

    def __init__(self, session: Session[FinetuneSessionState], monitor: CpuSpeedMonitor, *, steps: Sequence[str], feedback_step: str,
                 loop_n: int, gpus: int, emit: Callable[[Any], None]) -> None:
        self.session, self.monitor, self.emit = session, monitor, emit
        self.steps, self.feedback_step, self.loop_n = list(steps), feedback_step, loop_n
        self.cpu_parts = set() if gpus > 0 else set(CPU_PARTS)
        self.times: list[StepTime] = [e.step_time for e in read_events(session.events_path)
                                      if isinstance(e, ReforecastEvent)]
        self.latest: Reforecast | None = None
        self._started: float | None = None
        self._last_end: float | None = None  # the previous step_end of this run: the gap between steps counts

    # -- the first forecast ---------------------------------------------------------------------------
    def forecast(self) -> Forecast:
        """The session's first forecast (an empty one when it has none: then measured step times alone)."""
        scenario = self.session.state.scenario
        found = scenario.forecast if scenario is not None else None
        return found if isinstance(found, Forecast) else Forecast(planner="?", loops=[], plan={})

    def _reforecast(self, current_loop: int, steps_left: Sequence[str], slowness: float) -> Reforecast:
        first = self.forecast()
        return reforecast(first, self.times, STEP_PARTS, steps=self.steps, loop_n=self.loop_n,
                          current_loop=current_loop, steps_left=steps_left, slowness=slowness,
                          forecast_slowness=first.cpu_slowness or slowness, cpu_parts=self.cpu_parts)

    # -- the event-log subscriber ---------------------------------------------------------------------
    def __call__(self, event: Any) -> None:
        kind = getattr(event, "type", None)
        if kind == "step_start":
            self._started = event.ts
        elif kind == "step_end" and event.loop is not None:
            self._after(event)

    def _after(self, event: Any) -> None:
        start = self._started if self._started is not None else event.ts - event.duration_s
        slowness = self.monitor.slowness(start, event.ts) or self.monitor.now()
        # the wall time the step added: its run plus the snapshot and events between it and the previous step
        seconds = max(event.duration_s, event.ts - self._last_end) if self._last_end is not None else event.duration_s
        self._last_end = event.ts
        step = StepTime(loop=event.loop, step=event.step, seconds=round(seconds, 3),
                        slowness=round(slowness, 3), ok=event.status != "failed")
        self.times.append(step)
        loop, left = self._position(event)
        self.latest = self._reforecast(loop, left, self.monitor.now())
        self.emit(ReforecastEvent(loop=event.loop, step_time=step, reforecast=self.latest))

    def _position(self, event: Any) -> tuple[int, list[str]]:
        """(the loop that runs next, its steps still to run) after ``event`` (a step_end)."""
        if event.step == self.feedback_step:
            return event.loop + 1, []
        if event.status == "failed":
            return event.loop, [self.feedback_step]
        target = event.goto or self.steps[self.steps.index(event.step) + 1]
        return event.loop, self.steps[self.steps.index(target):]

    # -- the engine's --timeout rule ------------------------------------------------------------------
    def loop_guard(self, ctx: StepContext[FinetuneSessionState]) -> str | None:
        """Why loop ``ctx.state.loop_index`` must not start: its re-forecast does not fit in the time left."""
        left = ctx.time_left()
        if left is None:
            return None
        loop = int(ctx.state.loop_index)
        ahead = self._reforecast(loop, [], self.monitor.now())
        need = next((lp.seconds for lp in ahead.loops if lp.loop == loop), None)
        if need is None or need <= left:
            return None
        basis = "this session's step times" if self.times else "the first forecast"
        return (f"loop {loop} was not started: it is re-forecast at {format_duration(need)} from {basis} and the "
                f"load now (CPU {ahead.slowness:.1f}x an idle one), and {format_duration(left)} of --timeout is "
                "left; resume with a larger --timeout to run it")


def start_monitor() -> CpuSpeedMonitor:
    """The CPU-speed sampler of a session (stopped by the caller when the run ends)."""
    from ftagent.core.cpu_speed import CpuSpeedMonitor

    return CpuSpeedMonitor().start()
