"""One process per session (issue #22): a second resume exits 2 naming the holder; a killed holder frees it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ftagent.core.errors import UserInputError
from ftagent.engine.session import LOCK_FILE, Session, SessionLock, list_snapshots
from ftagent.finetune.state import FinetuneSessionState
from tests.unit.test_reliability import scenario

REPO = Path(__file__).resolve().parents[2]
HOLD = """
import sys, time
from pathlib import Path
from ftagent.engine.session import SessionLock
lock = SessionLock(Path(sys.argv[1])).acquire()  # kept: a dropped FileLock releases itself
print("held", flush=True)
time.sleep(300)
"""


def _holder(directory: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(directory)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout.readline().strip() == "held"
    return proc


def _session(root: Path) -> Session:
    run = {"benchmark": "demo_add", "base_model": "builtin/tiny-qwen2", "loop_n": 1}
    session = Session.create(root / "log", config={"run": run}, state_cls=FinetuneSessionState,
                             scenario=scenario(root))
    session.state.trace.baseline_val = 0.0
    session.save(0, 0, "propose")
    return session


def test_a_second_holder_is_refused_with_pid_host_and_start(tmp_path):
    session = _session(tmp_path)
    holder = _holder(session.dir)
    try:
        with pytest.raises(UserInputError) as err:
            SessionLock(session.dir).acquire()
        text = str(err.value)
        assert f"pid {holder.pid} on {socket.gethostname()}, since 20" in text and "UTC" in text
        assert "--no-checkout" in text
    finally:
        holder.kill()
        holder.wait()
    # the holder died by SIGKILL: its lock died with it, nothing stale blocks the next resume
    lock = SessionLock(session.dir).acquire()
    assert lock.held and lock.holder().pid == os.getpid()
    lock.release()


def test_session_lock_is_reentrant_per_session_object_and_released(tmp_path):
    session = _session(tmp_path)
    assert session.lock() is session.lock()  # taking it twice in one run is not a conflict
    other = Session(session.dir, session.state)
    with pytest.raises(UserInputError, match=f"pid {os.getpid()}"):
        other.lock()
    session.unlock()
    other.lock()
    other.unlock()
    assert (session.dir / LOCK_FILE).exists()


def test_resume_of_a_running_session_exits_2_and_changes_nothing(tmp_path):
    session = _session(tmp_path)
    events_before = session.events_path.read_bytes() if session.events_path.exists() else b""
    snaps_before = [p.read_bytes() for p in list_snapshots(session.dir)]
    holder = _holder(session.dir)
    env = {**os.environ, "PYTHONPATH": str(REPO), "FT_FILE_PATH": str(tmp_path / "ft"),
           "LOG_PATH": str(tmp_path / "log"), "WORKSPACE_PATH": str(tmp_path / "ws"), "FT_PLANNER": "heuristic",
           "FT_ENV_TYPE": "local", "FT_SANDBOX": "none", "FT_TOOLS_ENV": str(tmp_path / "no-tools")}
    env.pop("CHAT_MODEL", None)
    try:
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "ftagent", "llm_finetune", "--path", str(session.dir),
                               "--quiet"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"is in use by pid {holder.pid} on {socket.gethostname()}" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert (session.events_path.read_bytes() if session.events_path.exists() else b"") == events_before
    assert [p.read_bytes() for p in list_snapshots(session.dir)] == snaps_before
    print(f"refused in {time.monotonic() - t0:.1f}s")
