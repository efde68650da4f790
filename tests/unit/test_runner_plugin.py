"""Issue 33: a new runner is one file plus one registration; what it does is declared, not its name.

``SubprocessRunner`` below is that one file: registered in the runner registry under a new name, it is
selected by ``FT_ENV_TYPE``, passes the start-up checks, and runs the data step's real script.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from ftagent.core.errors import UserInputError
from ftagent.core.settings import load_settings
from ftagent.runners import factory, sandbox
from ftagent.runners.base import RunResult, capabilities
from ftagent.tools.llamafactory.trainer import run_data_processing


class SubprocessRunner:
    """A trivial third-party runner: each command is a plain subprocess (``python`` = this interpreter)."""

    name = "subproc"
    runs_on_host = True
    needs_bwrap = True  # it confines nothing by itself

    def run(self, cmd, *, tool, workdir, env=None, mounts=None, gpus=None, timeout=None, log_file=None,
            stop=None) -> RunResult:
        argv = [sys.executable if cmd[0] == "python" else cmd[0], *cmd[1:]]
        start = time.monotonic()
        proc = subprocess.run(argv, cwd=workdir, capture_output=True, text=True, timeout=timeout)
        if log_file is not None:
            Path(log_file).write_text(proc.stdout + proc.stderr)
        return RunResult(exit_code=proc.returncode, duration_s=time.monotonic() - start,
                         log_tail=(proc.stdout + proc.stderr)[-2000:], log_file=str(log_file) if log_file else None)


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(factory.RUNNERS._objects, "subproc", SubprocessRunner)  # = RUNNERS.register(...)
    monkeypatch.setenv("FT_ENV_TYPE", "SubProc")


def test_a_registered_runner_is_selected_and_runs_the_data_step(registered, tmp_path: Path, monkeypatch) -> None:
    settings = load_settings()
    assert settings.ft.env_type == "subproc"  # settings no longer reject a name only the registry knows
    runner = factory.get_runner(settings)
    assert isinstance(runner, SubprocessRunner)
    caps = capabilities(runner)
    assert caps.needs_bwrap and caps.runs_on_host and not caps.confines_itself and not caps.reaps_leftovers
    monkeypatch.setattr(sandbox, "probe_bwrap", lambda executable=None: (False, "bwrap is not installed"))
    with pytest.raises(UserInputError, match="the subproc runner cannot confine it"):
        sandbox.require_confinement(settings, True)  # its declared needs_bwrap, not its name, decides
    (tmp_path / "process_data.py").write_text(
        "import json\njson.dump([{'instruction': 'q', 'input': '', 'output': 'a'}], open('data.json', 'w'))\n")
    result = run_data_processing(tmp_path, runner, timeout=60)
    assert result.ok and (tmp_path / "data.json").is_file()
    assert (tmp_path / "logs" / "process_data.log").is_file()


def test_an_unknown_runner_name_is_one_did_you_mean_at_start_up(monkeypatch) -> None:
    monkeypatch.setenv("FT_ENV_TYPE", "dokcer")
    settings = load_settings()  # a plain string here: settings cannot see the registry (layers)
    with pytest.raises(UserInputError, match="unknown FT_ENV_TYPE runner 'dokcer'. Did you mean 'docker'"):
        sandbox.require_confinement(settings, False)  # the start-up check (finetune/app.py)


def test_builtin_runners_declare_their_capabilities() -> None:
    local, conda, docker = (capabilities(factory.runner_class(n)) for n in ("local", "conda", "docker"))
    assert local.needs_bwrap and local.runs_on_host and local.uses_tools_env and not local.reaps_leftovers
    assert conda.needs_bwrap and conda.runs_on_host and not conda.uses_tools_env
    assert docker.confines_itself and docker.reaps_leftovers and not docker.runs_on_host and not docker.needs_bwrap
