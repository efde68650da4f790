"""Sessions: JSON snapshots, resume from every step, checkout vs fork, corruption, SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ftagent.core.errors import UserInputError
from ftagent.engine.events import read_events
from ftagent.engine.loop import LoopEngine
from ftagent.engine.session import Session, list_snapshots
from tests.unit._workflows import STEPS, RecordingWorkflow, TraceState


def _run_full(tmp_path: Path, loops: int = 2) -> Session:
    session = Session.create(tmp_path / "log", state_cls=TraceState)
    LoopEngine(RecordingWorkflow(), session, loop_n=loops).run()
    return session


def test_snapshot_after_every_step_is_plain_json(tmp_path):
    session = _run_full(tmp_path)
    snaps = list_snapshots(session.dir)
    assert [f"{p.parent.name}/{p.name}" for p in snaps] == [
        f"{loop}/{i}_{s}" for loop in range(2) for i, s in enumerate(STEPS)
    ]
    raw = json.loads(snaps[-1].read_text())
    assert raw["schema_version"] == 1 and raw["loop_index"] == 2 and raw["trace"]["sota_loop"] == 1


@pytest.mark.parametrize("index", range(12))
def test_resume_from_every_step_with_checkout(tmp_path, index):
    session = _run_full(tmp_path)
    snapshot = list_snapshots(session.dir)[index]
    resumed, path = Session.load(snapshot, TraceState)
    resumed.checkout(path)
    assert list_snapshots(resumed.dir)[-1] == snapshot  # later snapshots are gone
    n_events = sum(1 for _ in read_events(resumed.events_path))
    assert n_events == resumed.state.event_count
    wf = RecordingWorkflow()
    LoopEngine(wf, resumed, loop_n=2).run()
    expected = [(li, s) for li in range(2) for s in STEPS][index + 1:]
    assert wf.calls == expected  # continues right after the snapshot's step, nothing repeated
    assert resumed.state.loop_index == 2 and len(resumed.state.trace.experiments) == 2
    types = [e.type for e in read_events(resumed.events_path)]
    assert types.count("loop_end") == 2 and types.count("step_start") == 12


@pytest.mark.parametrize("index", [0, 5, 8])
def test_resume_without_checkout_forks_and_keeps_the_original(tmp_path, index):
    session = _run_full(tmp_path)
    before = sorted(p.name for p in list_snapshots(session.dir))
    events_before = session.events_path.read_bytes()
    loaded, path = Session.load(list_snapshots(session.dir)[index], TraceState)
    forked = loaded.fork(tmp_path / "log")
    assert forked.dir != session.dir and forked.state.session_id != session.state.session_id
    LoopEngine(RecordingWorkflow(), forked, loop_n=3).run()
    assert sorted(p.name for p in list_snapshots(session.dir)) == before
    assert session.events_path.read_bytes() == events_before
    assert forked.state.loop_index == 3


def test_load_latest_from_session_dir(tmp_path):
    session = _run_full(tmp_path, loops=1)
    loaded, path = Session.load(session.dir, TraceState)
    assert path.name == "5_feedback" and loaded.state.loop_index == 1
    loaded2, _ = Session.load(session.dir / "__session__", TraceState)
    assert loaded2.state.session_id == session.state.session_id


def test_corrupted_and_incompatible_snapshots_fail_clearly(tmp_path):
    session = _run_full(tmp_path, loops=1)
    snap = list_snapshots(session.dir)[2]
    snap.write_text('{"schema_version": 1, "session_id": ')
    with pytest.raises(UserInputError, match="corrupted"):
        Session.load(snap, TraceState)
    snap.write_text(json.dumps({"schema_version": 99, "session_id": "x"}))
    with pytest.raises(UserInputError, match="schema version 99"):
        Session.load(snap, TraceState)
    snap.write_text(json.dumps({"schema_version": 1, "session_id": "x", "loop_index": "many"}))
    with pytest.raises(UserInputError, match="incompatible: .loop_index.: "):
        Session.load(snap, TraceState)
    snap.write_bytes(b"\x80\x81 not text")
    with pytest.raises(UserInputError, match="corrupted"):
        Session.load(snap, TraceState)


def test_paths_that_are_not_snapshots(tmp_path):
    with pytest.raises(UserInputError, match="does not exist"):
        Session.load(tmp_path / "nope", TraceState)
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserInputError, match="no snapshots"):
        Session.load(tmp_path / "empty", TraceState)
    stray = tmp_path / "notes.txt"
    stray.write_text("hi")
    with pytest.raises(UserInputError, match="is not a snapshot"):
        Session.load(stray, TraceState)


def test_goto_rewrites_stale_later_snapshots(tmp_path):
    session = Session.create(tmp_path / "log", state_cls=TraceState)
    wf = RecordingWorkflow(plan={(0, "validate"): "goto:code"}, goto_cap=1)
    LoopEngine(wf, session, loop_n=1, step_n=4).run()  # propose, code, validate(goto), code
    names = [p.name for p in list_snapshots(session.dir)]
    assert names == ["0_propose", "1_code"]  # the stale 2_validate of round 1 is gone
    loaded, _ = Session.load(session.dir, TraceState)
    assert loaded.state.step_index == 2 and loaded.state.current.gotos == {"code": 1}


CHILD = """
import sys
from pathlib import Path
from ftagent.engine.loop import LoopEngine
from ftagent.engine.session import Session
from tests.unit._workflows import RecordingWorkflow, TraceState
log_dir, marker = Path(sys.argv[1]), Path(sys.argv[2])
session = Session.create(log_dir, state_cls=TraceState)
wf = RecordingWorkflow(plan={(1, "train"): "sleep:60"}, log=marker)
LoopEngine(wf, session, loop_n=3).run()
"""


def test_sigkill_mid_step_then_resume_loses_nothing(tmp_path):
    marker = tmp_path / "calls.jsonl"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "log"), str(marker)], env=env)
    deadline = time.time() + 60
    while time.time() < deadline:
        if marker.exists() and '[1, "train"' in marker.read_text():
            break
        time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("child never reached loop 1 / train")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    (session_dir,) = (tmp_path / "log").iterdir()
    resumed, path = Session.load(session_dir, TraceState)
    assert path.name == "2_validate" and path.parent.name == "1"
    resumed.checkout(path)
    wf = RecordingWorkflow()
    LoopEngine(wf, resumed, loop_n=3).run()
    assert wf.calls[0] == (1, "train")  # the killed step runs again; nothing finished runs twice
    state = resumed.state
    assert state.loop_index == 3 and [e.loop for e in state.trace.experiments] == [0, 1, 2]
    events = list(read_events(resumed.events_path))
    starts = [(e.loop, e.step) for e in events if e.type == "step_start"]
    assert starts == [(li, s) for li in range(3) for s in STEPS]  # the partial step's events were cut


def test_wait_delivered_returns_once_every_written_event_reached_the_subscribers(tmp_path):
    """``EventLog.wait_delivered`` (what the scheduler calls before its loop guard, issue 41): an event another thread
    has written but is still handing to the subscribers is waited for; one the caller itself is delivering (it was
    called from a subscriber) is not, or it would wait for ever."""
    import threading

    from ftagent.engine.event_log import EventLog
    from ftagent.engine.events import Message

    log = EventLog(tmp_path / "events.jsonl")
    holding, go, seen = threading.Event(), threading.Event(), threading.Event()
    inner: list[bool] = []

    def subscriber(event):
        if event.text == "held":
            holding.set()
            go.wait(30)
            seen.set()
        elif event.text == "inner":
            log.wait_delivered()  # from inside its own delivery: returns
            inner.append(True)

    log.subscribe(subscriber)
    emitter = threading.Thread(target=log.emit, args=(Message(text="held"),))
    emitter.start()
    assert holding.wait(30)
    waited: list[bool] = []
    waiting, wait = threading.Event(), log._delivered.wait

    def noting_wait(*args, **kwargs):  # the waiter is inside wait_delivered's wait: only then is the hold released
        waiting.set()
        return wait(*args, **kwargs)

    log._delivered.wait = noting_wait  # type: ignore[method-assign]
    waiter = threading.Thread(target=lambda: (log.wait_delivered(), waited.append(seen.is_set())))
    waiter.start()
    assert waiting.wait(30)
    go.set()
    waiter.join(30)
    emitter.join(30)
    assert waited == [True]  # it returned only after the held event had reached the subscriber
    done = threading.Thread(target=log.emit, args=(Message(text="inner"),))
    done.start()
    done.join(30)
    assert inner == [True] and not done.is_alive()
    assert [e.text for e in read_events(log.path)] == ["held", "inner"]
