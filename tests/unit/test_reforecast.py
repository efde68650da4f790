"""Issue 43, "The forecast follows the machine": the rest of a session is re-forecast after every step from
its own measured step times and the CPU's load now (``core.reforecast_arithmetic``, ``core.cpu_speed``,
``finetune.session_reforecast``), shown on the console, in events, in the report; ``--timeout`` does not start a loop
the re-forecast says cannot finish.

The load test: a session of 4 loops whose steps run real CPU work (SHA-256, as a CPU training does arithmetic)
in processes of their own sessions, as the runners start the tools, pinned to one CPU with the test; halfway
(loop 1's train step) it starts 8 CPU-bound processes on the same CPU, each in its own session (another user's
work). The
re-forecast at each later loop start must be within ±30 % of what then remained (the first forecast alone was
off by far more, which the test checks too, so it cannot pass without following the load).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic import BaseModel

from ftagent.core.cpu_speed import CpuSpeedMonitor
from ftagent.core.forecast_arithmetic import Forecast, LoopForecast
from ftagent.core.reforecast_arithmetic import StepTime, predict_step, reforecast
from ftagent.engine.events import ReforecastEvent, read_events
from ftagent.engine.loop import LoopEngine, StepContext
from ftagent.engine.session import LoopState, Session
from ftagent.finetune.session_reforecast import CPU_PARTS, STEP_PARTS, Reforecaster
from tests.unit._workflows import TraceState

STEPS = ["propose", "code", "validate", "train", "evaluate", "feedback"]


def _forecast(loops: int, other: float, train: float, evaluate: float, slowness: float = 1.0,
              final: float | None = None) -> Forecast:
    return Forecast(planner="heuristic", plan={}, cpu_slowness=slowness, final_eval_s=final,
                    loops=[LoopForecast(loop=i, train_s=train, eval_s=evaluate, other_s=other) for i in range(loops)])


# -- the arithmetic ------------------------------------------------------------------------------------------
def test_a_step_measured_under_load_is_rescaled_to_the_load_now():
    f = _forecast(3, other=10.0, train=30.0, evaluate=20.0, slowness=1.0)
    # loop 0's train took 60 s at slowness 2: on an idle CPU 30 s, as forecast (ratio 1)
    times = [StepTime(loop=0, step="train", seconds=60.0, slowness=2.0)]
    kw = dict(forecast_slowness=1.0, cpu_parts=set(CPU_PARTS))
    assert predict_step(f, times, STEP_PARTS, 1, "train", slowness=3.0, **kw) == pytest.approx(90.0)
    assert predict_step(f, times, STEP_PARTS, 1, "train", slowness=1.0, **kw) == pytest.approx(30.0)
    # evaluate not measured yet: every measured step's ratio (1.0 here), at the load now
    assert predict_step(f, times, STEP_PARTS, 1, "evaluate", slowness=3.0, **kw) == pytest.approx(60.0)
    # the forecast was 2x off at idle: the measured ratio carries over
    slow = [StepTime(loop=0, step="train", seconds=120.0, slowness=2.0)]
    assert predict_step(f, slow, STEP_PARTS, 2, "train", slowness=1.0, **kw) == pytest.approx(60.0)
    # a failed step measures nothing; a step the forecast has 0 s for is its measured mean
    failed = [StepTime(loop=0, step="train", seconds=1.0, slowness=1.0, ok=False),
              StepTime(loop=0, step="propose", seconds=4.0, slowness=2.0)]
    assert predict_step(f, failed, STEP_PARTS, 1, "train", slowness=1.0, **kw) == pytest.approx(30.0)
    assert predict_step(f, failed, STEP_PARTS, 1, "propose", slowness=2.0, **kw) == pytest.approx(4.0)  # llm: unscaled
    # on a GPU (no CPU parts) the load scales nothing
    assert predict_step(f, times, STEP_PARTS, 1, "train", slowness=3.0, forecast_slowness=1.0,
                        cpu_parts=set()) == pytest.approx(60.0)


def test_the_rest_of_a_session_by_part():
    f = _forecast(3, other=10.0, train=30.0, evaluate=20.0, final=40.0)
    times = [StepTime(loop=0, step=s, seconds=v, slowness=1.0) for s, v in
             (("propose", 1.0), ("code", 1.0), ("validate", 20.0), ("train", 60.0))]
    r = reforecast(f, times, STEP_PARTS, steps=STEPS, loop_n=3, current_loop=0, steps_left=["evaluate", "feedback"],
                   slowness=1.0, forecast_slowness=1.0, cpu_parts=set(CPU_PARTS))
    # every forecast part measured so far took twice the forecast: evaluate (not measured) too
    assert r.current_s == pytest.approx(40.0) and [lp.loop for lp in r.loops] == [1, 2]
    assert r.loops[0].seconds == pytest.approx(1 + 1 + 20 + 60 + 40)  # propose/code: their mean, feedback: none yet
    assert r.final_s == pytest.approx(80.0) and r.ratios == {"validate": 2.0, "train": 2.0}
    assert r.remaining_s == pytest.approx(r.current_s + 2 * r.loops[0].seconds + r.final_s)
    assert r.first_remaining_s == pytest.approx(20 + 2 * 60 + 40)


# -- the load test: the real engine, the real re-forecaster, the real CPU-speed sampler ----------------------
class _Scenario(BaseModel):
    forecast: Forecast | None = None


class _State(TraceState):
    scenario: _Scenario | None = None


UNIT_MIB = 300  # one unit of work: SHA-256 over 300 MiB (~0.7 s of an idle CPU here)
WORK = "import hashlib, os, sys\nos.sched_setaffinity(0, {int(sys.argv[2])})\nb = bytes(1 << 20)\n" \
       "for _ in range(int(sys.argv[1])): hashlib.sha256(b).digest()\n"


def _work(units: float, cpu: int) -> None:
    """A tool's run: a process in a session of its own (as the runners start LLaMA-Factory and OpenCompass,
    ``runners/process.py``), doing ``units`` of CPU work on ``cpu``."""
    subprocess.run([sys.executable, "-c", WORK, str(int(units * UNIT_MIB)), str(cpu)], check=True,
                   start_new_session=True)


class CpuWorkflow:
    """propose → code → validate → train → evaluate → feedback, each doing a fixed amount of CPU work."""

    feedback_step = "feedback"
    goto_caps: dict[str, int] = {}
    WORK = {"propose": 0.1, "code": 0.1, "validate": 1.0, "train": 3.0, "evaluate": 2.0, "feedback": 0.1}

    def __init__(self, cpu: int, on_step=None) -> None:
        self.cpu = cpu
        self.on_step = on_step or (lambda loop, step: None)

    def steps(self):
        def make(name):
            def step(ctx: StepContext):
                self.on_step(ctx.loop.index, name)
                _work(self.WORK[name], self.cpu)

            return step
        return [(name, make(name)) for name in STEPS]

    def new_loop(self, index: int) -> LoopState:
        return LoopState(index=index)

    def is_best_loop(self, state, index: int) -> bool:
        return False

    def produced_result(self, state) -> bool:
        return True


HOGS = 8


def _hog(cpu: int) -> subprocess.Popen:
    """A CPU-bound process on ``cpu``, in a session of its own as another user's work would be (Linux schedules
    each session as a group, ``sched_autogroup``: a child in the test's own session would share the test's
    group instead of adding load beside it)."""
    return subprocess.Popen([sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"],
                            start_new_session=True)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity (Linux)")
def test_the_re_forecast_follows_a_load_that_rises_halfway(tmp_path):
    cpu = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})  # this thread (and the sampler it starts) and the hogs share one CPU
    hogs: list[subprocess.Popen] = []
    monitor = CpuSpeedMonitor(interval_s=1.0)
    try:
        monitor.start()
        started = time.time()
        _work(1.0, cpu)  # the "probe": one unit, timed, at the load now
        unit = time.time() - started
        first = _forecast(4, other=unit, train=3 * unit, evaluate=2 * unit, slowness=monitor.slowness(started) or 1.0)
        session = Session.create(tmp_path / "log", state_cls=_State)
        session.state.scenario = _Scenario(forecast=first)

        def on_step(loop: int, step: str) -> None:
            if (loop, step) == (1, "train"):  # halfway: the load rises
                hogs.extend(_hog(cpu) for _ in range(HOGS))

        wf = CpuWorkflow(cpu, on_step)
        ref = Reforecaster(session, monitor, steps=STEPS, feedback_step="feedback", loop_n=4, gpus=0,
                           emit=session.events.emit)
        session.events.subscribe(ref)
        LoopEngine(wf, session, loop_n=4).run()
        ended = time.time()
    finally:
        for h in hogs:
            h.kill()
            h.wait()
        monitor.stop()
        os.sched_setaffinity(0, before)
    events = [e for e in read_events(session.events_path) if isinstance(e, ReforecastEvent)]
    assert len(events) == 4 * len(STEPS)  # one after every step
    loops = {e.loop: round(e.duration_s, 1) for e in read_events(session.events_path) if e.type == "loop_end"}
    starts = {e.loop + 1: e for e in events if e.step_time.step == "feedback" and e.loop + 1 in (2, 3)}
    rows = []
    for loop, e in sorted(starts.items()):
        remained = ended - e.ts
        rows.append((loop, (e.reforecast.remaining_s - remained) / remained,
                     ((e.reforecast.first_remaining_s or 0) - remained) / remained))
        print(f"loop {loop} start: re-forecast {e.reforecast.remaining_s:.1f} s, first forecast "
              f"{e.reforecast.first_remaining_s:.1f} s, remained {remained:.1f} s (error {rows[-1][1]:+.0%}, first "
              f"{rows[-1][2]:+.0%}); CPU {e.reforecast.slowness:.1f}x idle; loop times {loops}")
    if all(abs(first) <= 0.30 for _, _, first in rows):
        pytest.skip(f"the {HOGS} CPU-bound processes did not slow the loops enough here ({loops}) for the first "
                    "forecast to be off by 30 %: the test cannot tell following the load from ignoring it")
    for loop, error, _ in rows:
        assert abs(error) <= 0.30, f"loop {loop}: re-forecast off by {error:+.0%}"


# -- --timeout uses it; the console, the events, the report and a resume show it ------------------------------
class _Steady:
    """A CPU-speed monitor that reads one slowness (the engine tests need no sampler)."""

    def __init__(self, slowness: float = 1.0) -> None:
        self.value = slowness

    def slowness(self, since, until=None):
        return self.value

    def now(self, window_s=None):
        return self.value


def _session_with(tmp_path: Path, first: Forecast) -> Session:
    session = Session.create(tmp_path / "log", state_cls=_State)
    session.state.scenario = _Scenario(forecast=first)
    return session


def test_a_loop_the_re_forecast_says_cannot_finish_is_not_started(tmp_path):
    """The first forecast said 0.05 s a loop; each loop really takes ~4 s. With --timeout 10.8 s, loops 0 and 1
    run (~6.8 s left before loop 1) and loop 2 (re-forecast at ~4 s, ~2.8 s left) is not started: the
    session ends timeout, with the reason (before: loop 2 started and was cut at the deadline)."""
    from tests.unit._workflows import RecordingWorkflow

    session = _session_with(tmp_path, _forecast(5, other=0.01, train=0.02, evaluate=0.02))
    # a session's first event loads the secret masker (core.secret_shapes: ~0.5-1 s under load); the app writes its
    # session_start before any loop, so the loops' time budget does not pay for it
    from ftagent.engine.events import SessionStart

    session.events.emit(SessionStart(session_id="s"))
    wf = RecordingWorkflow(plan={(i, "train"): "sleep:4.0" for i in range(5)})
    ref = Reforecaster(session, _Steady(), steps=STEPS, feedback_step="feedback", loop_n=5, gpus=0,
                       emit=session.events.emit)
    session.events.subscribe(ref)
    # 10.8 s with ~4 s loops: loop 1 starts while a loop takes at most 5.4 s, loop 2 does not while one takes over
    # 3.6 s — 1.4 s of engine overhead allowed per loop (3.3 s with ~1 s loops let loop 2 start on a quiet machine,
    # and 5.4 s with ~2 s loops left 0.7 s, still a wall-clock margin a loaded CI machine can eat)
    summary = LoopEngine(wf, session, loop_n=5, timeout_s=10.8, loop_guard=ref.loop_guard).run()
    assert summary.status == "timeout" and summary.loops_done == 2, summary
    assert summary.message.startswith("loop 2 was not started: it is re-forecast at ")
    assert "from this session's step times" in summary.message and "of --timeout is left" in summary.message
    assert not any(loop == 2 for loop, _ in wf.calls)


def test_loop_0_is_not_started_when_the_first_forecast_says_it_cannot_finish(tmp_path):
    from tests.unit._workflows import RecordingWorkflow

    session = _session_with(tmp_path, _forecast(2, other=100.0, train=600.0, evaluate=300.0))
    ref = Reforecaster(session, _Steady(2.0), steps=STEPS, feedback_step="feedback", loop_n=2, gpus=0,
                       emit=session.events.emit)
    wf = RecordingWorkflow()
    summary = LoopEngine(wf, session, loop_n=2, timeout_s=600.0, loop_guard=ref.loop_guard).run()
    assert summary.status == "no_model" and wf.calls == []
    # 1,000 s forecast on an idle CPU (the probes ran at 1.0x), at 2.0x now: 2,000 s
    assert "loop 0 was not started: it is re-forecast at 33 min 20 s from the first forecast" in summary.message
    assert "CPU 2.0x an idle one" in summary.message


def test_the_console_prints_each_re_forecast_and_counts_it_down():
    from io import StringIO

    from rich.console import Console

    from ftagent.core.reforecast_arithmetic import LoopLeft, Reforecast
    from ftagent.views.console import ConsoleProgress

    out = StringIO()
    display = ConsoleProgress(Console(file=out, width=300), loop_n=3, live=False, clock=lambda: 1000.0)
    r = Reforecast(remaining_s=754.0, current_s=200.0, loops=[LoopLeft(loop=2, seconds=554.0)], slowness=3.1,
                   forecast_slowness=1.2, first_remaining_s=300.0)
    display(ReforecastEvent(loop=1, ts=990.0, step_time=StepTime(loop=1, step="train", seconds=180.0, slowness=3.0),
                            reforecast=r))
    line = out.getvalue()
    assert ("re-forecast: 12 min 34 s left (this loop 3 min 20 s, loop 2 9 min 14 s); CPU 3.1x as slow as idle "
            "(at the forecast 1.2x); the first forecast said 5 min") in line
    assert "expected 12 min 24 s more" in display.status_line()


def test_the_report_shows_the_first_forecast_and_the_last_re_forecast_before_each_loop(tmp_path):
    from ftagent.engine.events import ForecastEvent, LoopEnd, SessionStart
    from ftagent.views.report import build_report, render_markdown

    first = _forecast(2, other=10.0, train=30.0, evaluate=20.0)
    session = _session_with(tmp_path, first)
    ev = session.events
    ev.emit(SessionStart(session_id="s"))
    ev.emit(ForecastEvent(forecast=first))
    ref = Reforecaster(session, _Steady(2.0), steps=STEPS, feedback_step="feedback", loop_n=2, gpus=0, emit=ev.emit)
    ev.subscribe(ref)
    from ftagent.engine.events import StepEnd, StepStart

    t = 100.0
    for loop in (0, 1):
        for step, seconds in zip(STEPS, (1, 1, 20, 60, 40, 1), strict=True):
            ev.emit(StepStart(step=step, loop=loop, ts=t))
            t += seconds
            ev.emit(StepEnd(step=step, status="ok", duration_s=seconds, loop=loop, ts=t))
        ev.emit(LoopEnd(status="succeeded", duration_s=123.0, loop=loop, ts=t))
    md = render_markdown(build_report(session.dir))
    assert "| loop | first forecast | re-forecast at its start | actual | error (first) | error (re-forecast) |" in md
    assert "| 0 | 1 min | - | 2 min 3 s | -51% | - |" in md
    assert "| 1 | 1 min | 2 min 3 s | 2 min 3 s | -51% | +0% |" in md  # loop 0 measured: loop 1 predicted right
    assert "re-forecast after every step" in md

    resumed = Reforecaster(session, _Steady(2.0), steps=STEPS, feedback_step="feedback", loop_n=2, gpus=0,
                           emit=ev.emit)
    assert len(resumed.times) == 12 and resumed.times[3].step == "train"  # a resume reads its step times back


def test_the_cpu_speed_monitor_averages_windows_and_weighs_the_newest_most():
    from ftagent.core.cpu_speed import sample_slowness

    clock = {"t": 0.0}
    values = iter([1.0, 1.0, 1.0, 1.0, 4.0, 4.0])
    monitor = CpuSpeedMonitor(interval_s=1.0, clock=lambda: clock["t"], sampler=lambda: next(values))
    for t in range(6):
        clock["t"] = float(t)
        monitor.sample()
    assert monitor.slowness(0.0, 3.0) == 1.0 and monitor.slowness(4.0, 5.0) == 4.0
    assert monitor.slowness(10.0, 11.0) is None
    assert 2.5 < monitor.now() < 4.0  # two new samples of 4 outweigh four old ones of 1 (plain mean: 2.0)
    assert 1.0 <= sample_slowness() <= 50.0  # a real sample
