"""Issue 32 item 1: after `make demo` the printed follow-up commands must run from where the user is.

The CLI lives in `.venv/bin`, which is not on the user's PATH: a printed bare `ftagent …` was
"command not found". Each printed command must name an existing executable that runs.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from ftagent.views.commands import cli_command, next_steps
from ftagent.views.report import export_command

BIN = Path(sys.executable).parent


def _commands(lines: list[str]) -> list[list[str]]:
    return [shlex.split(line.split("#")[0]) for line in lines if line.startswith("  ")]


def test_printed_commands_run_without_the_venv_on_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # a user's shell: .venv/bin not on it
    lines = next_steps(tmp_path / "log" / "s1", exported=True)
    commands = _commands(lines)
    assert [c[1] for c in commands] == ["report", "ui", "export"]
    for argv in commands:
        assert Path(argv[0]).is_absolute() and os.access(argv[0], os.X_OK), argv
    assert any("source" in line and "activate" in line for line in lines)
    assert export_command(tmp_path / "s1").split()[0] == commands[0][0]
    env = {**os.environ, "PATH": "/usr/bin:/bin"}
    done = subprocess.run([commands[0][0], "--version"], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("ftagent "), done.stderr


def test_plain_ftagent_when_the_path_finds_this_installation(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", f"{BIN}:/usr/bin:/bin")
    assert cli_command() == "ftagent"
    lines = next_steps(tmp_path / "s1", exported=False)
    assert [c[:2] for c in _commands(lines)] == [["ftagent", "report"], ["ftagent", "ui"]]
    assert not any("activate" in line for line in lines)


def test_another_ftagent_on_the_path_is_not_trusted(monkeypatch, tmp_path):
    other = tmp_path / "bin"
    other.mkdir()
    (other / "ftagent").write_text("#!/bin/sh\necho other\n")
    (other / "ftagent").chmod(0o755)
    monkeypatch.setenv("PATH", f"{other}:{BIN}:/usr/bin:/bin")
    assert cli_command() == str(BIN / "ftagent")
