"""The forecast follows the machine (issue 43): after every step the rest of the session is re-forecast.

Before: the forecast was made once, after the baseline, from probes; on a machine whose load rose from 1 to
30 the demo forecast 9 min 17 s and took 33 min 41 s (−72 %) and nothing said so while it ran.

:class:`Reforecaster` subscribes to the session's event log. On each ``step_end`` it records the step's
measured time and the CPU slowness meanwhile (:class:`ftagent.core.cpu_speed.CpuSpeedMonitor`, sampled every
5 s), re-forecasts what is left (:func:`ftagent.core.reforecast_arithmetic.reforecast`: the first forecast calibrated by
this session's measured steps, at the slowness now) and emits a ``reforecast`` event — the console prints it,
the UI and ``status --json`` show the latest, the report compares each loop with the last re-forecast made
before it started. :meth:`Reforecaster.loop_guard` is the engine's ``--timeout`` rule: a loop whose
re-forecast does not fit in the time left is not started.

Each loop in flight is followed on its own (:class:`ftagent.finetune.trials_seen.TrialsSeen`): a training that
runs is priced by its own progress (its total steps × its measured s/step), a validated one by its planned steps
× this session's s/step, and with K trials at once (``FT_PARALLEL_TRIALS``) the loops still to start are scheduled
over the K slots after the running ones' rest. While a command reports progress the re-forecast is refreshed at
most every ``refresh_s`` (30 s) too (a ``reforecast`` event without a step time), so "expected … more" follows a
long training instead of counting down a number made before it started (a real session said "0 s more" with two
7,500-step trainings 12 and 18 minutes from their end).

A resumed session reads its earlier step times back from its ``reforecast`` events. On a GPU the training and
evaluation do not run on the CPU, so the slowness scales nothing there (measured step times only).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ftagent.core.durations import format_duration
from ftagent.core.forecast_arithmetic import Forecast
from ftagent.core.reforecast_arithmetic import Reforecast, StepTime, reforecast
from ftagent.engine.events import ReforecastEvent, read_events
from ftagent.finetune.trials_seen import TrialsSeen

if TYPE_CHECKING:
    from ftagent.core.cpu_speed import CpuSpeedMonitor
    from ftagent.engine.loop import StepContext
    from ftagent.engine.session import Session
    from ftagent.finetune.state import FinetuneSessionState

#: the fine-tuning workflow's steps as parts of the forecast (core.forecast_arithmetic.LoopForecast): validate is the
#: forecast's "validate + data", the planner's LLM time is spread over its calls (1 proposal, 2 coders, 1 feedback)
STEP_PARTS: dict[str, tuple[str, float]] = {"propose": ("llm", 0.25), "code": ("llm", 0.5),
                                            "validate": ("other", 1.0), "train": ("train", 1.0),
                                            "evaluate": ("eval", 1.0), "feedback": ("llm", 0.25)}
CPU_PARTS = {"other", "train", "eval"}  # what a busier CPU slows (the LLM waits on a server)


REFRESH_S = 30.0  # a re-forecast on a command's progress at most this often (one after every step regardless)


class Reforecaster:
    """Re-forecasts after every step of a session and answers whether the next loop fits (see the module)."""

    def __init__(self, session: Session[FinetuneSessionState], monitor: CpuSpeedMonitor, *, steps: Sequence[str],
                 feedback_step: str, loop_n: int, gpus: int, emit: Callable[[Any], None], slots: int = 1,
                 refresh_s: float = REFRESH_S, clock: Callable[[], float] = time.time) -> None:
        self.session, self.monitor, self.emit, self.clock = session, monitor, emit, clock
        self.steps, self.feedback_step, self.loop_n = list(steps), feedback_step, loop_n
        self.slots, self.refresh_s = max(1, slots), refresh_s
        self.cpu_parts = set() if gpus > 0 else set(CPU_PARTS)
        self.times: list[StepTime] = [e.step_time for e in read_events(session.events_path)
                                      if isinstance(e, ReforecastEvent) and e.step_time is not None]
        train = next(s for s, (part, _) in STEP_PARTS.items() if part == "train")
        self.seen = TrialsSeen(self.steps, feedback_step, train, monitor,
                               highest=max((t.loop for t in self.times), default=-1))
        self.latest: Reforecast | None = None
        self._lock = threading.Lock()  # K trials emit from their own threads
        self._made = float("-inf")  # when the last re-forecast was made (the progress refresh waits refresh_s)

    # -- the first forecast ---------------------------------------------------------------------------
    def forecast(self) -> Forecast:
        """The session's first forecast (an empty one when it has none: then measured step times alone)."""
        scenario = self.session.state.scenario
        found = scenario.forecast if scenario is not None else None
        return found if isinstance(found, Forecast) else Forecast(planner="?", loops=[], plan={})

    def _reforecast(self, now: float, next_loop: int | None = None) -> Reforecast:
        first, slowness = self.forecast(), self.monitor.now()
        return reforecast(first, self.times, STEP_PARTS, steps=self.steps, loop_n=self.loop_n,
                          trials=self.seen.in_flight(now), next_loop=self.seen.highest + 1 if next_loop is None
                          else next_loop, slots=self.slots, now=now, slowness=slowness,
                          forecast_slowness=first.cpu_slowness or slowness, cpu_parts=self.cpu_parts)

    # -- the event-log subscriber ---------------------------------------------------------------------
    def __call__(self, event: Any) -> None:
        if getattr(event, "type", None) == "reforecast":
            return
        out = None
        with self._lock:  # the event is emitted outside it: this subscriber sees its own event too
            step = self.seen.see(event)
            if step is not None:
                self.times.append(step)
                out = ReforecastEvent(ts=event.ts, loop=event.loop, step_time=step, reforecast=self._made_now(event.ts))
            elif event.type == "progress" and event.loop is not None and event.ts - self._made >= self.refresh_s:
                out = ReforecastEvent(ts=event.ts, loop=event.loop, reforecast=self._made_now(event.ts))
        if out is not None:
            self.emit(out)

    def _made_now(self, now: float) -> Reforecast:
        self.latest, self._made = self._reforecast(now), now
        return self.latest

    # -- the engine's --timeout rule ------------------------------------------------------------------
    def loop_guard(self, ctx: StepContext[FinetuneSessionState]) -> str | None:
        """Why loop ``ctx.state.loop_index`` must not start: its re-forecast does not fit in the time left (with K
        trials at once it starts on a free slot now, so its own time is what must fit)."""
        left = ctx.time_left()
        if left is None:
            return None
        loop = int(ctx.state.loop_index)
        with self._lock:
            ahead = self._reforecast(self.clock(), next_loop=loop)
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
