"""Issue 44: machine-readable status — `ftagent status SESSION --json` (the MCP status tool's object) and
`ftagent report SESSION --json`, built from the one projection of events (views/session.py) on real session
folders written by the real engine (tests/helpers/make_sessions.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ftagent.cli.main import app
from ftagent.core.errors import UserInputError
from ftagent.engine.event_log import EventLog
from ftagent.engine.events import Progress, StepStart
from ftagent.engine.session import EVENTS_FILE, SessionLock
from ftagent.views.session import load_session
from ftagent.views.status import SessionStatus, session_status
from ftagent.views.trials import busy_fraction
from tests.helpers.make_sessions import SessionPlan, decisions_plan, make_session


@pytest.fixture
def log(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("LOG_PATH", str(tmp_path / "log"))
    monkeypatch.chdir(tmp_path)
    return tmp_path / "log"


def _status(*args: str) -> dict:
    res = CliRunner().invoke(app, ["status", *args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def test_a_finished_session(log):
    session = make_session(log, decisions_plan())
    data = _status(str(session))
    status = SessionStatus.model_validate(data)  # the JSON is the typed model, whole
    assert (status.state, status.alive, status.loops_done, status.benchmark) == ("completed", False, 3, "demo_add")
    assert status.baseline == {"validation": 0.1, "test": 0.05}
    assert [lp.validation for lp in status.loops] == [0.4, 0.45, 0.9]
    assert [lp.became_sota for lp in status.loops] == [True, False, False]  # the rule's SOTA, not the top score
    assert status.sota is not None and status.sota.loop == 0 and status.sota.validation == 0.4
    interval = status.sota.intervals[0]
    assert (interval.against, interval.low, interval.high) == ("baseline", 0.2, 0.4)  # scores with intervals
    assert status.current.step is None and status.end_message == "3 loop(s) done"
    assert data["reforecast"] is None  # absent from these events: null
    # issue 41: the busy fraction every report gives (views.trials), computed from the loops' runs
    assert data["gpu_busy_fraction"] == busy_fraction(load_session(session)).fraction is not None


def test_a_running_session_says_where_it_is(log):
    session = make_session(log, SessionPlan(), running_after_steps=4)
    assert session_status(session).state == "stopped"  # no process holds it and it never ended: killed
    lock = SessionLock(session).acquire()  # now this process works in it, as `ftagent llm_finetune` would
    try:
        events = EventLog(session / EVENTS_FILE)
        events.emit(Progress(loop=0, phase="train", done=300, total=300))  # the finished train step's: not shown
        events.emit(StepStart(loop=0, step="evaluate"))
        events.emit(Progress(loop=0, phase="infer:validation", done=12, total=30, detail={"eta_s": 9.0},
                             ts=time.time() + 1))
        status = session_status(session)
        assert (status.state, status.alive, status.holder.pid) == ("running", True, __import__("os").getpid())
        assert (status.current.loop, status.current.step) == (0, "evaluate")
        assert status.current.progress["done"] == 12 and status.current.progress["detail"] == {"eta_s": 9.0}
        text = CliRunner().invoke(app, ["status", str(session)]).output
        assert "running (pid" in text and "now: loop 0, step evaluate (infer:validation 12/30)" in text
    finally:
        lock.release()


def test_sessions_by_id_and_the_list(log):
    first = make_session(log, decisions_plan())
    second = make_session(log, SessionPlan(), running_after_steps=2)
    assert _status(first.name)["session_id"] == first.name  # an id under LOG_PATH
    rows = {r["session_id"]: r for r in _status()}  # (ids of one second sort by their random part)
    assert set(rows) == {first.name, second.name}
    assert (rows[first.name]["state"], rows[first.name]["sota_loop"], rows[second.name]["state"]) == (
        "completed", 0, "stopped")


def test_an_unknown_session_exits_2(log):
    res = CliRunner().invoke(app, ["status", "nope", "--json"])
    assert isinstance(res.exception, UserInputError) and "no session 'nope'" in str(res.exception)
    with pytest.raises(UserInputError):
        CliRunner().invoke(app, ["status", "../../etc"], catch_exceptions=False)


def test_report_json_is_report_json(log):
    session = make_session(log, decisions_plan())
    res = CliRunner().invoke(app, ["report", str(session), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data == json.loads((session / "report.json").read_text())
    assert data["best_loop"] == 0 and data["best_intervals"][0]["low"] == 0.2
