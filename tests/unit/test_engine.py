"""Loop engine: order, goto cap, failure → feedback, budgets, deadlines."""

from __future__ import annotations

from ftagent.engine.events import read_events
from ftagent.engine.loop import LoopEngine
from ftagent.engine.session import Session
from tests.unit._workflows import STEPS, RecordingWorkflow, TraceState


def _engine(tmp_path, wf, **kw):
    session = Session.create(tmp_path / "log", state_cls=TraceState)
    return LoopEngine(wf, session, **kw), session


def test_steps_run_in_order_for_each_loop(tmp_path):
    wf = RecordingWorkflow()
    engine, session = _engine(tmp_path, wf, loop_n=2)
    summary = engine.run()
    assert summary.status == "completed"
    assert wf.calls == [(0, s) for s in STEPS] + [(1, s) for s in STEPS]
    assert session.state.loop_index == 2
    types = [e.type for e in read_events(session.events_path)]
    assert types.count("loop_end") == 2 and types[-1] == "session_end"


def test_goto_jumps_back_and_respects_cap(tmp_path):
    wf = RecordingWorkflow(plan={(0, "validate"): "goto:code"}, goto_cap=2)
    engine, session = _engine(tmp_path, wf, loop_n=1)
    engine.run()
    names = [s for _, s in wf.calls]
    # code+validate run 3 times (1 + 2 gotos), then the cap turns the third goto into a failure
    assert names.count("code") == 3 and names.count("validate") == 3
    assert "train" not in names and names[-1] == "feedback"
    exp = session.state.trace.get(0)
    assert exp.failure is not None and "gave up after 2" in exp.failure.message


def test_step_error_becomes_structured_failure_and_jumps_to_feedback(tmp_path):
    wf = RecordingWorkflow(plan={(0, "train"): "fail", (1, "code"): "crash"})
    engine, session = _engine(tmp_path, wf, loop_n=3)
    summary = engine.run()
    assert summary.status == "completed"
    assert [s for li, s in wf.calls if li == 0] == ["propose", "code", "validate", "train", "feedback"]
    assert [s for li, s in wf.calls if li == 1] == ["propose", "code", "feedback"]
    f0, f1 = summary.failures
    assert (f0.stage, f0.error_type.value, f0.log_tail) == ("train", "CONFIG", "bad key")
    assert f1.stage == "code" and f1.message == "RuntimeError: boom" and "Traceback" in f1.log_tail
    # loop 2 succeeded and is the SOTA; failed loops are never SOTA
    assert session.state.trace.sota_loop == 2
    ends = [e for e in read_events(session.events_path) if e.type == "loop_end"]
    assert [e.status for e in ends] == ["failed", "failed", "succeeded"]


def test_environment_failure_stops_the_session(tmp_path):
    wf = RecordingWorkflow(plan={(0, "code"): "env"})
    engine, _ = _engine(tmp_path, wf, loop_n=3)
    summary = engine.run()
    assert summary.status == "env_error" and summary.message == "no runner"
    assert wf.calls[-1] == (0, "code")


def test_failing_feedback_step_stops_the_session(tmp_path):
    wf = RecordingWorkflow(plan={(0, "feedback"): "crash"})
    engine, _ = _engine(tmp_path, wf, loop_n=2)
    summary = engine.run()
    assert summary.status == "env_error" and "feedback step failed" in summary.message


def test_step_n_limits_steps_in_this_invocation(tmp_path):
    wf = RecordingWorkflow()
    engine, session = _engine(tmp_path, wf, loop_n=5, step_n=4)
    summary = engine.run()
    assert summary.status == "step_limit" and summary.steps_run == 4
    assert session.state.loop_index == 0 and session.state.step_index == 4


def test_timeout_is_checked_between_steps(tmp_path):
    clock = {"t": 1000.0}

    def fake_clock():
        clock["t"] += 10.0  # every clock read advances 10 s
        return clock["t"]

    wf = RecordingWorkflow()
    engine, _ = _engine(tmp_path, wf, loop_n=10, timeout_s=100.0, clock=fake_clock)
    summary = engine.run()
    scored = any(step == "feedback" for _, step in wf.calls)  # a loop finished: it recorded a score
    assert summary.status == ("timeout" if scored else "no_model")  # issue 43: no result is no success
    assert 0 < len(wf.calls) < 12


def test_deadline_is_handed_to_steps(tmp_path):
    wf = RecordingWorkflow(plan={(0, "train"): "deadline", (0, "evaluate"): "deadline"})
    engine, _ = _engine(tmp_path, wf, loop_n=1, timeout_s=3600.0)
    engine.run()
    first, second = wf.deadlines
    assert 3500 < first <= 3600 and second <= first


def test_no_timeout_means_no_deadline(tmp_path):
    wf = RecordingWorkflow(plan={(0, "train"): "deadline"})
    engine, _ = _engine(tmp_path, wf, loop_n=1)
    engine.run()
    assert wf.deadlines == [None]


def test_step_events_carry_durations_and_status(tmp_path):
    wf = RecordingWorkflow(plan={(0, "validate"): "goto:code"}, goto_cap=1)
    engine, session = _engine(tmp_path, wf, loop_n=1)
    engine.run()
    ends = [e for e in read_events(session.events_path) if e.type == "step_end"]
    assert all(e.duration_s >= 0 and e.loop == 0 for e in ends)
    assert [e.status for e in ends if e.step == "validate"] == ["goto", "failed"]


def test_finish_runs_once_before_session_end_of_a_completed_session_only(tmp_path):
    """Issue 31 item 3: the final evaluation's hook; a crash in it is a warning, the loops' status stands."""
    from ftagent.engine.events import Message

    seen = []

    def finish(ctx):
        seen.append(ctx.session.state.loop_index)
        ctx.emit(Message(text="final"))

    engine, session = _engine(tmp_path, RecordingWorkflow(), loop_n=2, finish=finish)
    assert engine.run().status == "completed" and seen == [2]
    types = [(e.type, getattr(e, "text", "")) for e in read_events(session.events_path)]
    assert types[-2:] == [("message", "final"), ("session_end", "")]
    engine, _ = _engine(tmp_path / "b", RecordingWorkflow(), loop_n=5, step_n=3, finish=finish)
    assert engine.run().status == "step_limit" and seen == [2]  # a session to be resumed: not yet

    def crash(ctx):
        raise RuntimeError("boom")

    engine, session = _engine(tmp_path / "c", RecordingWorkflow(), loop_n=1, finish=crash)
    assert engine.run().status == "completed"
    warn = [e for e in read_events(session.events_path) if e.type == "message"]
    assert warn and warn[-1].level == "warning" and "boom" in warn[-1].text


def test_loop_duration_counts_only_running_time_across_a_resume(tmp_path):
    """Issue 32 item 1: a loop resumed (or forked) 1000 s later reports its steps' time, not the gap."""
    clock = {"t": 5000.0}

    def fake_clock():
        clock["t"] += 1.0  # every clock read advances 1 s
        return clock["t"]

    session = Session.create(tmp_path / "log", state_cls=TraceState)
    assert LoopEngine(RecordingWorkflow(), session, loop_n=1, step_n=2, clock=fake_clock).run().status == "step_limit"
    clock["t"] += 1000.0  # the gap before the resume
    LoopEngine(RecordingWorkflow(), session, loop_n=1, clock=fake_clock).run()
    events = list(read_events(session.events_path))
    steps = sum(e.duration_s for e in events if e.type == "step_end" and e.loop == 0)
    (end,) = [e for e in events if e.type == "loop_end"]
    assert 0 < end.duration_s == steps < 100
