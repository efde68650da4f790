"""The child registry and the reaper (issue #22): what a killed run left is ended by the next one, nothing else."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from ftagent.engine.events import LeftoversReaped
from ftagent.runners import reaper
from tests.unit.test_reaper_supervise import _alive, _parent_script, _pids, _wait_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux process semantics")


def _killed_predecessor(tmp_path: Path) -> tuple[list[int], int]:
    """A parent whose supervisor died with it too (SIGKILL of both): its tool keeps running, recorded."""
    shell = "sleep 300 & echo $! >> pids; echo $$ >> pids; wait"
    parent = subprocess.Popen([sys.executable, str(_parent_script(tmp_path, shell))], cwd=tmp_path)
    assert _wait_for(lambda: len(_pids(tmp_path / "pids")) == 2)
    (supervisor,) = psutil.Process(parent.pid).children()
    # freeze the parent first: awake, it sees its supervisor die and kills the group itself (a race that
    # failed this test 2 runs in 3 on a loaded machine); then the worst case: even the supervisor is gone
    parent.send_signal(signal.SIGSTOP)
    supervisor.send_signal(signal.SIGKILL)
    assert _wait_for(lambda: not _alive(supervisor.pid), timeout=10)  # a zombie of the frozen parent
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    tools = _pids(tmp_path / "pids")
    assert all(_alive(p) for p in tools), "the tool must outlive its dead supervisor for this test to mean anything"
    return tools, parent.pid


def test_the_next_run_ends_what_a_killed_one_left_and_says_so(tmp_path):
    from ftagent.finetune.lifecycle import reap_before_work

    tools, _ = _killed_predecessor(tmp_path)
    try:
        settings = SimpleNamespace(ft=SimpleNamespace(file_path=tmp_path, env_type="local"))
        registry = tmp_path / "registry"
        # the parent script used this folder; the run's own folder is FT_FILE_PATH/run/children
        (tmp_path / reaper.REGISTRY_DIR).parent.mkdir(parents=True, exist_ok=True)
        os.rename(registry, tmp_path / reaper.REGISTRY_DIR)
        events = []
        reaped = reap_before_work(settings, events.append)
        assert _wait_for(lambda: not any(_alive(p) for p in tools), timeout=5.0)
        assert [p["session"] for p in reaped.processes] == ["sess-1"]
        (event,) = events
        assert isinstance(event, LeftoversReaped) and "1 process(es) of sess-1" in event.message
        assert not list((tmp_path / reaper.REGISTRY_DIR).glob("*.json"))  # the record went with them
        assert reap_before_work(settings, events.append).empty and len(events) == 1  # nothing twice
    finally:
        reaper.activate(None)
        for pid in tools:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_children_of_a_live_owner_are_never_touched(tmp_path):
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        reaper.activate(tmp_path)
        record = reaper.record_process(proc.pid, ["sleep", "300"])  # owned by this (live) process
        reaper.activate(None)
        assert record.path is not None and reaper.reap_leftovers(tmp_path).empty
        assert _alive(proc.pid) and record.path.exists()
        reaper.forget(record)
        assert not record.path.exists()
    finally:
        proc.kill()
        proc.wait()


def test_a_reused_pid_is_not_killed(tmp_path):
    """The recorded group leader is gone and its pid now names an unrelated, older process: spared."""
    bystander = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        started = psutil.Process(bystander.pid).create_time()
        dead_owner = reaper.Owner(pid=1, host=socket.gethostname(), started=0.0)  # pid 1 did not start at 0
        record = reaper.ChildRecord(kind="process", owner=dead_owner, pgid=bystander.pid,
                                    leader_started=started + 60)
        (tmp_path / "1-a.json").write_text(record.model_dump_json())
        assert reaper.reap_leftovers(tmp_path).empty
        assert _alive(bystander.pid)
    finally:
        bystander.kill()
        bystander.wait()


class _Container:
    def __init__(self, cid: str, owner: str) -> None:
        self.id, self.attrs, self.removed = cid, {"Labels": {reaper.OWNER_LABEL: owner}}, False

    def remove(self, force: bool = False) -> None:
        self.removed = force


class _Client:
    def __init__(self, containers) -> None:
        self.containers = SimpleNamespace(list=lambda all, sparse, filters: list(containers),  # noqa: A006
                                          get=lambda cid: next(c for c in containers if c.id == cid))


def test_containers_of_dead_owners_are_removed_and_live_ones_kept(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    me = reaper.Owner.current()
    gone = reaper.Owner(pid=dead.pid, host=me.host, started=time.time() - 5)
    elsewhere = reaper.Owner(pid=dead.pid, host="another-node", started=1.0)
    containers = [_Container("c-dead", gone.label), _Container("c-mine", me.label),
                  _Container("c-remote", elsewhere.label)]
    reaped = reaper.reap_leftovers(tmp_path / "none", docker_client=_Client(containers))
    assert reaped.containers == ["c-dead"]
    assert [c.removed for c in containers] == [True, False, False]


def test_the_event_reaches_the_console_and_the_session_view(tmp_path):
    from rich.console import Console

    from ftagent.engine.event_log import EventLog
    from ftagent.engine.events import SessionStart
    from ftagent.views.console import ConsoleProgress
    from ftagent.views.session import load_session

    event = LeftoversReaped(processes=[{"pid": 7, "command": "opencompass x", "session": "s0"}],
                            message="ended what a killed predecessor left running: 1 process(es) of s0")
    console = Console(record=True, width=200, force_terminal=False)
    ConsoleProgress(console, quiet=False)(event)
    assert "warning: ended what a killed predecessor left running: 1 process(es) of s0" in console.export_text()
    session = tmp_path / "s1"
    log = EventLog(session / "events.jsonl")
    log.emit(SessionStart(session_id="s1"))
    log.emit(event)
    view = load_session(session)
    assert [m["text"] for m in view.messages if m.get("level") == "warning"] == [event.message]
