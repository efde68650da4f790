"""SIGTERM and ``ftagent job cancel`` reach the tools' processes (issue #22).

The task's ``ftagent`` here is a stand-in that does what ``llm_finetune`` does for its processes
(``finetune.lifecycle.begin_run``, then a tool command through ``runners.process.run_process``) and
writes how its run ended; the integration test ``integration/test_kill_resume.py`` does the same with the
real ``llm_finetune``. The cancel goes through the real job supervisor (``jobs.executors.execute_task``)
and ``ftagent job cancel``.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ftagent.cli import app
from ftagent.jobs import executors as ex
from ftagent.jobs.tasks import build_plan, task_descriptions, validate_tasks
from tests.unit.test_reaper_supervise import _alive, _pids, _wait_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux process semantics")
REPO = Path(__file__).resolve().parents[2]
STAND_IN = '''#!{python}
import os, sys
sys.path.insert(0, {repo!r})
from pathlib import Path
from types import SimpleNamespace
from ftagent.finetune.lifecycle import begin_run
from ftagent.runners.process import run_process
root = Path(os.environ["FT_STANDIN_ROOT"])
end = begin_run(SimpleNamespace(ft=SimpleNamespace(file_path=root / "ft", env_type="local")), lambda e: None)
try:
    run_process(["bash", "-c", "sleep 300 & echo $! >> pids; sleep 300 & echo $! >> pids; echo $$ >> pids; wait"],
                cwd=root, env={{"PATH": "/usr/bin:/bin"}})
    status = "completed"
except KeyboardInterrupt as exc:
    status = "interrupted: " + str(exc)
finally:
    end()
(root / "status").write_text(status)
'''


def _stand_in(folder: Path) -> Path:
    path = folder / "ftagent-stand-in"
    path.write_text(STAND_IN.format(python=sys.executable, repo=str(REPO)))
    path.chmod(0o755)
    return path


def _cleanup(root: Path) -> None:
    for pid in _pids(root / "pids"):
        if _alive(pid):
            import os

            os.kill(pid, signal.SIGKILL)


def test_sigterm_ends_the_run_like_ctrl_c_and_takes_the_tools(tmp_path, monkeypatch):
    monkeypatch.setenv("FT_STANDIN_ROOT", str(tmp_path))
    proc = subprocess.Popen([str(_stand_in(tmp_path))], cwd=tmp_path, start_new_session=True)
    try:
        assert _wait_for(lambda: len(_pids(tmp_path / "pids")) == 3), "the tool never started"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        assert (tmp_path / "status").read_text() == "interrupted: terminated by SIGTERM"
        assert _wait_for(lambda: not any(_alive(p) for p in _pids(tmp_path / "pids")), timeout=20.0)
    finally:
        _cleanup(tmp_path)


def test_job_cancel_reaches_the_tools_of_a_running_task(tmp_path, monkeypatch):
    monkeypatch.setenv("FT_STANDIN_ROOT", str(tmp_path))
    spec, errors = validate_tasks({"tasks": [{"model": "builtin/tiny-qwen2", "benchmark": "demo_add"}]})
    assert spec is not None, errors
    plan = build_plan(spec, job_id="j1", log_base=tmp_path / "log", workspace_base=tmp_path / "ws",
                      ftagent_bin=str(_stand_in(tmp_path)), descriptions=task_descriptions(spec))
    job = ex.prepare_job_dir(plan)
    result: list[int] = []
    supervisor = threading.Thread(target=lambda: result.append(
        ex.execute_task(plan.tasks[0], job, executor="test", poll_s=0.05, grace_s=20.0)))
    supervisor.start()
    try:
        assert _wait_for(lambda: len(_pids(tmp_path / "pids")) == 3), "the tool never started"
        res = CliRunner().invoke(app, ["job", "cancel", str(job)])
        assert res.exit_code == 0 and plan.tasks[0].name in res.output
        t0 = time.monotonic()
        supervisor.join(timeout=30)
        assert result == [ex.CANCELLED_RC]
        # the grace period (20 s) was not needed: ftagent ended its run on the SIGTERM, the tools with it
        assert time.monotonic() - t0 < 15  # under the 20 s grace, with room for a loaded machine
        assert (tmp_path / "status").read_text() == "interrupted: terminated by SIGTERM"
        assert _wait_for(lambda: not any(_alive(p) for p in _pids(tmp_path / "pids")), timeout=20.0)
    finally:
        _cleanup(tmp_path)
