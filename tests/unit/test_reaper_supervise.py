"""Children die with ftagent: the supervisor (runners/supervise.py) and the run_process contract (issue #22)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from ftagent.runners import reaper
from ftagent.runners.process import run_process

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux process semantics")


def _wait_for(predicate, timeout: float = 20.0, step: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _parent_script(tmp: Path, shell: str) -> Path:
    """A stand-in for ftagent: runs one tool command with run_process (optionally recording it)."""
    script = tmp / "parent.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from ftagent.runners import reaper
        from ftagent.runners.process import run_process
        reaper.activate(Path({str(tmp / "registry")!r}), "sess-1")
        run_process(["bash", "-c", {shell!r}], cwd=Path({str(tmp)!r}), env={{"PATH": "/usr/bin:/bin"}},
                    log_file=Path({str(tmp / "tool.log")!r}))
    """), encoding="utf-8")
    return script


def _pids(path: Path) -> list[int]:
    if not path.exists():
        return []
    return [int(x) for x in path.read_text().split()]


@pytest.mark.parametrize("leave_group", [False, True], ids=["same-group", "setsid-grandchild"])
def test_sigkill_of_the_parent_takes_the_whole_tool_tree(tmp_path, leave_group):
    spawn = "setsid sleep 300 &" if leave_group else "sleep 300 &"
    shell = f"{spawn} echo $! >> pids; sleep 300 & echo $! >> pids; echo $$ >> pids; wait"
    parent = subprocess.Popen([sys.executable, str(_parent_script(tmp_path, shell))], cwd=tmp_path)
    try:
        pids = _wait_for(lambda: len(_pids(tmp_path / "pids")) == 3 and _pids(tmp_path / "pids"))
        assert pids, "the tool never started"
        if leave_group:  # setsid forks when the caller leads a group: give the real sleeper time to exist
            time.sleep(0.3)
        everything = [p.pid for p in psutil.Process(parent.pid).children(recursive=True)]
        assert len(everything) >= 3  # bash and two sleepers (and the supervisor)
        recorded = list((tmp_path / "registry").glob("*.json"))
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        t0 = time.monotonic()
        left = _wait_for(lambda: not any(_alive(p) for p in everything), timeout=20.0)
        assert left, f"left running 5 s after SIGKILL: {[p for p in everything if _alive(p)]}"
        print(f"tool tree gone {time.monotonic() - t0:.2f}s after the parent's SIGKILL")
        assert recorded, "the group is recorded while it runs (for the reaper, if even the supervisor dies)"
    finally:
        for pid in _pids(tmp_path / "pids"):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_exit_codes_and_start_failures_are_the_tools_own(tmp_path):
    env = {"PATH": "/usr/bin:/bin"}
    assert run_process(["sh", "-c", "echo hi; exit 3"], cwd=tmp_path, env=env).exit_code == 3
    killed = run_process(["sh", "-c", "kill -9 $$"], cwd=tmp_path, env=env)
    assert killed.exit_code == -signal.SIGKILL
    ok = run_process(["sh", "-c", "echo out; echo err >&2"], cwd=tmp_path, env=env)
    assert ok.ok and ok.log_tail.splitlines() == ["out", "err"]
    missing = run_process(["no-such-tool-xyz"], cwd=tmp_path, env=env)
    assert missing.exit_code is None and "cannot start no-such-tool-xyz" in missing.log_tail


def test_timeout_kills_the_tree_and_the_record_is_dropped(tmp_path):
    reaper.activate(tmp_path / "registry", "s")
    try:
        result = run_process(["bash", "-c", "sleep 300 & echo $! > pid; wait"], cwd=tmp_path,
                             env={"PATH": "/usr/bin:/bin"}, timeout=1.0)
    finally:
        reaper.activate(None)
    assert result.timed_out and result.exit_code is None
    assert not _alive(int((tmp_path / "pid").read_text()))
    assert not list((tmp_path / "registry").glob("*.json"))  # ended: nothing left to reap


def test_supervisor_exits_at_once_when_its_owner_is_already_gone(tmp_path):
    from ftagent.runners.supervise import supervised_argv

    dead = subprocess.Popen(["true"])
    dead.wait()
    proc = subprocess.Popen(supervised_argv(["sleep", "300"], owner_pid=dead.pid), start_new_session=True)
    assert proc.wait(timeout=10) == -signal.SIGKILL


def test_the_model_server_dies_with_ftagent(tmp_path):
    """The vLLM server runs outside bubblewrap: a SIGKILL of ftagent must still take it (a stand-in server)."""
    from tests.unit.test_oc_vllm_server import MINI_SERVER

    (tmp_path / "server.py").write_text(MINI_SERVER, encoding="utf-8")
    script = tmp_path / "serve.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from ftagent.tools.opencompass import serving
        port = serving.free_port()
        argv = [sys.executable, {str(tmp_path / "server.py")!r}, str(port), "ft-model"]
        with serving.model_server(argv, base_url=f"http://127.0.0.1:{{port}}", served_name="ft-model",
                                  log_file=Path({str(tmp_path / "server.log")!r}), start_timeout=60):
            Path({str(tmp_path / "ready")!r}).write_text("1")
            time.sleep(300)
    """), encoding="utf-8")
    parent = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    try:
        assert _wait_for(lambda: (tmp_path / "ready").exists(), timeout=60), "the stand-in server never got ready"
        tree = psutil.Process(parent.pid).children(recursive=True)
        assert any("server.py" in " ".join(p.cmdline()) for p in tree)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        assert _wait_for(lambda: not any(_alive(p.pid) for p in tree), timeout=20.0), \
            f"left 5 s after SIGKILL: {[p.pid for p in tree if _alive(p.pid)]}"
    finally:
        for proc in psutil.process_iter(["cmdline"]):  # orphans too (they are what this test is about)
            if str(tmp_path / "server.py") in " ".join(proc.info["cmdline"] or []):
                proc.kill()
