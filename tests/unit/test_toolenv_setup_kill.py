"""Issue 34 item 3: a killed `ftagent env setup` takes its pip with it; a second setup of the same env waits
for nobody's pip: it exits 2 naming the running one; a rerun after the kill works.

Real processes: the CLI runs against an env whose ``bin/python`` is a shell stand-in (``-m pip`` sleeps
while a ``slow`` file exists and leaves a grandchild ``sleep``; ``-I -c`` answers the import check).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

FAKE_PYTHON = """#!/bin/sh
dir=$(dirname "$0")
if [ "$1" = "-I" ]; then
  echo 'FTAGENT_CHECK {"versions": {"torch": "2.13.0+cpu", "transformers": "4.57.6", "llamafactory": "0.9.5", "opencompass": "0.5.4", "peft": "0.18.1"}, "errors": []}'
  exit 0
fi
echo "python $*" >> "$dir/calls.log"
if [ -f "$dir/slow" ]; then
  echo "Collecting torch==2.13.0"
  sleep 300 &
  echo $! > "$dir/grandchild.pid"
  wait
fi
"""


@pytest.fixture
def slow_env(tmp_path: Path) -> Path:
    env = tmp_path / "tools"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").write_text(FAKE_PYTHON)
    (env / "bin" / "python").chmod(0o755)
    (env / "bin" / "slow").write_text("")
    return env


def _cli_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "FT_FILE_PATH": str(tmp_path / "ff"), "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}


def _setup(env: Path, tmp_path: Path, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ftagent", "env", "setup", "--path", str(env), "--cpu"],
                            env=_cli_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **kw)


def _wait_for(path: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def _gone(procs: list[psutil.Process], seconds: float = 10) -> list[psutil.Process]:
    _gone_, alive = psutil.wait_procs(procs, timeout=seconds)
    return alive


def _end(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    proc.wait()


def test_a_killed_setup_leaves_no_pip_and_a_second_setup_names_the_first(slow_env: Path, tmp_path: Path) -> None:
    first = _setup(slow_env, tmp_path)
    procs: list[psutil.Process] = []
    try:
        _wait_for(slow_env / "bin" / "grandchild.pid")
        procs = psutil.Process(first.pid).children(recursive=True)
        assert any("sleep" in " ".join(p.cmdline()) for p in procs), [p.cmdline() for p in procs]
        second = _setup(slow_env, tmp_path)
        try:
            _out, err = second.communicate(timeout=30)
        except subprocess.TimeoutExpired:  # today's main: no lock, a second pip writes the same env
            _end(second)
            pytest.fail("a second `env setup` of the same env ran instead of exiting 2")
        assert second.returncode == 2, err
        assert f"pid {first.pid}" in err and "is installing into" in err and str(slow_env) in err
        os.kill(first.pid, signal.SIGKILL)  # ftagent alone, as the OOM killer or `kill -9` would
        first.wait()
        alive = _gone(procs)
        assert not alive, f"outlived ftagent: {[p.cmdline() for p in alive]}"
    finally:
        for proc in procs:
            try:
                proc.kill()
            except psutil.Error:
                pass
        _end(first)
    (slow_env / "bin" / "slow").unlink()
    rerun = _setup(slow_env, tmp_path)
    out, err = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, out + err
    assert "ready in" in out
    assert not list((tmp_path / "ff" / "run" / "children").glob("*.json"))  # every record dropped


def test_a_pip_whose_setup_and_supervisor_were_both_killed_is_reaped_by_the_next_setup(
        slow_env: Path, tmp_path: Path) -> None:
    first = _setup(slow_env, tmp_path)
    pips: list[psutil.Process] = []
    try:
        _wait_for(slow_env / "bin" / "grandchild.pid")
        supervisor = next(p for p in psutil.Process(first.pid).children() if "supervise.py" in " ".join(p.cmdline()))
        pips = supervisor.children(recursive=True)
        supervisor.suspend()  # it cannot watch its parent any more
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        supervisor.kill()
        time.sleep(0.5)
        assert all(p.is_running() for p in pips)  # orphans now: only the registry knows them
        (slow_env / "bin" / "slow").unlink()
        rerun = _setup(slow_env, tmp_path)
        out, err = rerun.communicate(timeout=120)
        assert rerun.returncode == 0, out + err
        assert "ended what a killed predecessor left running" in err
        assert not _gone(pips, 5)
    finally:
        for proc in pips:
            try:
                proc.kill()
            except psutil.Error:
                pass
        _end(first)
