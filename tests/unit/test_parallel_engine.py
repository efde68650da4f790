"""K trials at once (issue 41): the slot scheduler of ftagent.engine.parallel on a scripted workflow.

Trials overlap in time, serial steps (propose, feedback) never do, a finished trial's feedback is in the
trace for every later proposal, ``--loop-n`` counts trials, the budgets hold for the session, and a session
killed with trials in flight resumes each from its own last step without running a finished one again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from ftagent.core.slots import Slot
from ftagent.engine.events import read_events
from ftagent.engine.loop import LoopEngine
from ftagent.engine.parallel import LocalSlotPool
from ftagent.engine.session import Session, list_snapshots, snapshot_order
from tests.helpers.signals import ctrl_c_raises
from tests.unit._workflows import RecordingWorkflow, TraceState, saved_done

REPO = Path(__file__).resolve().parents[2]


class SerialWorkflow(RecordingWorkflow):
    """Propose and feedback are serial; counts how many serial steps run at once and what proposals saw."""

    serial_steps = ("propose", "feedback")

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.active, self.max_active, self.seen = 0, 0, {}
        self._lock = threading.Lock()

    def _make(self, name: str):
        inner = super()._make(name)
        if name not in self.serial_steps:
            return inner

        def step(ctx):
            with self._lock:
                self.active += 1
                self.max_active = max(self.max_active, self.active)
            try:
                if name == "propose":
                    self.seen[ctx.loop.index] = sorted(e.loop for e in ctx.state.trace.experiments)
                time.sleep(0.05)
                return inner(ctx)
            finally:
                with self._lock:
                    self.active -= 1

        return step


def _pool(k: int) -> LocalSlotPool:
    return LocalSlotPool([Slot(index=i) for i in range(k)])


def _intervals(session: Session, step: str) -> dict[int, tuple[float, float]]:
    out: dict[int, list[float]] = {}
    for ev in read_events(session.events_path):
        if ev.type in ("step_start", "step_end") and getattr(ev, "step", None) == step and ev.loop is not None:
            out.setdefault(ev.loop, []).append(ev.ts)
    return {k: (v[0], v[-1]) for k, v in out.items()}


def test_two_slots_run_trials_at_once_and_serial_steps_one_at_a_time(tmp_path: Path) -> None:
    wf = SerialWorkflow(plan={(i, "train"): "sleep:0.6" for i in range(4)})
    session = Session.create(tmp_path / "log", state_cls=TraceState)
    summary = LoopEngine(wf, session, loop_n=4, pool=_pool(2)).run()
    assert (summary.status, summary.loops_done) == ("completed", 4)
    trains = _intervals(session, "train")
    a, b = trains[0], trains[1]
    assert a[0] < b[1] and b[0] < a[1], trains  # trials 0 and 1 train at the same time
    assert wf.max_active == 1  # propose and feedback never overlap
    assert wf.seen[0] == [] and wf.seen[2] != []  # the third trial's proposal saw a finished one's feedback
    assert sorted(e.loop for e in session.state.trace.experiments) == [0, 1, 2, 3]
    assert session.state.running == [] and session.state.loop_index == 4
    starts = [e for e in read_events(session.events_path) if e.type == "trial_start"]
    assert sorted(e.loop for e in starts) == [0, 1, 2, 3] and {e.slot for e in starts} == {0, 1}
    snaps = list_snapshots(session.dir)
    assert all(snapshot_order(p) is not None for p in snaps)
    assert snapshot_order(snaps[-1]) == session.state.steps_done == 24  # the newest is the last step


def test_no_trial_starts_past_the_loop_limit_or_when_the_time_left_is_shorter_than_a_trial(tmp_path: Path) -> None:
    wf = SerialWorkflow(plan={(i, "train"): "sleep:0.5" for i in range(10)})
    session = Session.create(tmp_path / "log", state_cls=TraceState)
    summary = LoopEngine(wf, session, loop_n=10, timeout_s=1.6, pool=_pool(2)).run()
    started = {li for li, s in wf.calls if s == "propose"}
    assert summary.status == "timeout" and len(started) < 10
    msgs = [e.text for e in read_events(session.events_path) if e.type == "message"]
    assert any(m.startswith("no new trial:") for m in msgs), msgs


def test_an_environment_failure_in_one_trial_stops_the_other_which_resumes_later(tmp_path: Path) -> None:
    killed = []
    # loop 1 fails only once loop 0 trains (a loaded machine's fsyncs must not decide where loop 0 stands then)
    wf = SerialWorkflow(plan={(0, "train"): "sleep:3", (1, "code"): "env"}, waits={(1, "code"): (0, "train", "start")})
    session = Session.create(tmp_path / "log", state_cls=TraceState)
    t0 = time.time()
    summary = LoopEngine(wf, session, loop_n=2, pool=_pool(2), interrupt=lambda: killed.append(1)).run()
    assert summary.status == "env_error" and killed
    assert [(x.index, x.next_step) for x in session.state.running] == [(0, 3), (1, 1)]
    resumed, _ = Session.load(session.dir, TraceState)
    wf2 = SerialWorkflow()
    assert LoopEngine(wf2, resumed, loop_n=2, pool=_pool(2)).run().status == "completed"
    assert sorted(wf2.calls) == sorted([(0, s) for s in ("train", "evaluate", "feedback")]
                                       + [(1, s) for s in ("code", "validate", "train", "evaluate", "feedback")])
    assert time.time() - t0 < 30


_CHILD = """
import sys, time
from pathlib import Path
from ftagent.core.slots import Slot
from ftagent.engine.loop import LoopEngine
from ftagent.engine.parallel import LocalSlotPool
from ftagent.engine.session import Session
from tests.unit._workflows import RecordingWorkflow, TraceState
log, mode = Path(sys.argv[1]), sys.argv[2]
plan = {(0, "train"): "sleep:0.2", (1, "train"): "sleep:60"} if mode == "first" else {}
wf = RecordingWorkflow(plan=plan, log=log / "calls.jsonl")
wf.serial_steps = ("propose", "feedback")
if mode == "first":
    session = Session.create(log / "log", state_cls=TraceState)
else:
    session, _ = Session.load(next((log / "log").iterdir()), TraceState)
print(LoopEngine(wf, session, loop_n=2, pool=LocalSlotPool([Slot(index=0), Slot(index=1)])).run().status, flush=True)
"""


def _loop_0_saved(log: Path) -> bool:
    sessions = list(log.iterdir()) if log.exists() else []
    return bool(sessions) and saved_done(sessions[0], 0)


def test_sigkill_mid_round_resumes_each_trial_from_its_own_snapshot_without_rerunning_the_finished_one(
        tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(tmp_path), "first"], env=env, cwd=REPO)
    calls = tmp_path / "calls.jsonl"
    deadline = time.time() + 60
    while time.time() < deadline:  # loop 0 finished, loop 1 is in its 60 s training
        lines = calls.read_text().splitlines() if calls.exists() else []
        if [0, "feedback"] in [json.loads(x)[:2] for x in lines] and [1, "train"] in [json.loads(x)[:2] for x in lines]:
            break
        time.sleep(0.1)
    deadline = time.time() + 60  # the feedback's commit: loop 0's experiment is in the newest snapshot
    while time.time() < deadline and not _loop_0_saved(tmp_path / "log"):
        time.sleep(0.1)
    assert _loop_0_saved(tmp_path / "log")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = len(calls.read_text().splitlines())
    out = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path), "resume"], env=env, cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "completed", out.stderr
    after = [tuple(json.loads(x)[:2]) for x in calls.read_text().splitlines()[before:]]
    assert after == [(1, "train"), (1, "evaluate"), (1, "feedback")]  # loop 0 never again; loop 1 from train
    session, _ = Session.load(next((tmp_path / "log").iterdir()), TraceState)
    assert sorted(e.loop for e in session.state.trace.experiments) == [0, 1] and session.state.running == []


def test_a_one_at_a_time_session_saved_mid_loop_continues_as_a_trial(tmp_path: Path) -> None:
    session = Session.create(tmp_path / "log", state_cls=TraceState)
    LoopEngine(RecordingWorkflow(), session, loop_n=5, step_n=8).run()  # loop 1 stopped after its 2nd step
    resumed, _ = Session.load(session.dir, TraceState)
    wf = SerialWorkflow()
    assert LoopEngine(wf, resumed, loop_n=3, pool=_pool(2)).run().status == "completed"
    assert [s for li, s in wf.calls if li == 1] == ["validate", "train", "evaluate", "feedback"]
    assert sorted(e.loop for e in resumed.state.trace.experiments) == [0, 1, 2]


def test_an_interruption_ends_the_running_steps_and_keeps_each_trial_at_its_last_step(tmp_path: Path) -> None:
    killed: list[int] = []
    wf = SerialWorkflow(plan={(0, "train"): "sleep:3", (1, "train"): "sleep:3"}, waits={(1, "train"): (0, "train", "start")})
    session = Session.create(tmp_path / "log", state_cls=TraceState)

    def ctrl_c_once_both_train() -> None:  # however long a loaded machine took to get them there
        if wf.reached(1, "train").wait(30):
            time.sleep(0.1)
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C reaches the main thread

    sender = threading.Thread(target=ctrl_c_once_both_train)
    with ctrl_c_raises():
        sender.start()
        summary = LoopEngine(wf, session, loop_n=2, pool=_pool(2), interrupt=lambda: killed.append(1)).run()
        sender.join()
    assert summary.status == "interrupted" and killed
    assert sorted((x.index, x.next_step) for x in session.state.running) == [(0, 3), (1, 3)]
    ends = [e for e in read_events(session.events_path) if e.type == "step_end" and e.step == "train"]
    assert sorted(e.loop for e in ends) == [0, 1]
    assert all(e.status == "failed" and e.failure.error_type.value == "INTERRUPTED" for e in ends)


def test_a_fine_tuning_session_loads_its_trials_in_flight_as_fine_tuning_loops(tmp_path: Path) -> None:
    """Resumed with trials in flight, each running loop is the workflow's typed loop (it was the engine's base
    LoopState, and the first step of a resumed trial failed: 'a fine-tuning loop needs a FinetuneLoop')."""
    from ftagent.core.types import Hypothesis
    from ftagent.finetune.state import FinetuneLoop, FinetuneSessionState

    session = Session.create(tmp_path / "log", state_cls=FinetuneSessionState)
    session.state.running = [FinetuneLoop(index=1, next_step=3, slot=1, hypothesis=Hypothesis(hypothesis="h"))]
    session.save(1, 2, "validate", order=1)
    loaded, _ = Session.load(session.dir, FinetuneSessionState)
    (loop,) = loaded.state.running
    assert isinstance(loop, FinetuneLoop) and loop.hypothesis is not None and loop.next_step == 3


def test_the_applications_loop_guard_keeps_further_trials_from_starting(tmp_path: Path) -> None:
    """The fine-tuning app's re-forecast (issue 43's loop_guard) holds for trials at once too."""
    wf = SerialWorkflow()
    session = Session.create(tmp_path / "log", state_cls=TraceState)

    def guard(ctx):
        return "the next trial would end after --timeout" if session.state.loop_index >= 2 else None

    summary = LoopEngine(wf, session, loop_n=6, pool=_pool(2), loop_guard=guard).run()
    assert (summary.status, summary.message, summary.loops_done) == (
        "timeout", "the next trial would end after --timeout", 2)
