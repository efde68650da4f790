"""`ftagent export` bad input: one clear message, exit 2, nothing written or overwritten."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.test_export_sessions import exportable_session, no_sota_plan

REPO = Path(__file__).resolve().parents[2]


def run_export(args, cwd, env_extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FT_", "CHAT_", "OPENAI_", "HF_"))}
    env.update({"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", **(env_extra or {})})
    return subprocess.run([sys.executable, "-m", "ftagent", "export", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def _tree(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*")}


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> Path:
    return exportable_session(tmp_path_factory.mktemp("cli"))


def _assert_refused(res, fragment: str) -> None:
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], res.stderr
    assert "Traceback" not in res.stderr


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("args,fragment", [
    (["--loop", "7"], "loop 7 does not exist"),
    (["--loop", "1"], "loop 1 has no model: [train/OOM] CUDA out of memory"),
    (["--push-to-hub", "not a repo"], "needs a repo id like 'me/my-model'"),
    (["--push-to-hub", "me/model"], "needs HF_TOKEN"),
])
def test_bad_loop_or_hub_writes_nothing(session, tmp_path, args, fragment):
    before = _tree(session)
    res = run_export([session, *args], tmp_path)
    _assert_refused(res, fragment)
    assert _tree(session) == before  # no export/ folder, no snapshot or event touched


def test_not_a_session(tmp_path):
    (tmp_path / "plain").mkdir()
    _assert_refused(run_export([tmp_path / "plain"], tmp_path), "is not a session directory")
    _assert_refused(run_export([tmp_path / "missing"], tmp_path), "is not a session directory")
    assert [p.name for p in tmp_path.iterdir()] == ["plain"]


def test_no_best_loop(tmp_path):
    session = exportable_session(tmp_path, plan=no_sota_plan())
    _assert_refused(run_export([session], tmp_path), "pass --loop N")


def test_target_that_is_not_empty_is_kept(session, tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    _assert_refused(run_export([session, "--to", target], tmp_path), "exists and is not an empty folder")
    assert [p.name for p in target.iterdir()] == ["keep.txt"] and (target / "keep.txt").read_text() == "mine"
    (tmp_path / "file").write_text("x")
    _assert_refused(run_export([session, "--to", tmp_path / "file"], tmp_path), "is not an empty folder")
    assert (tmp_path / "file").read_text() == "x"


@pytest.mark.parametrize("env", [
    {"HF_TOKEN": "hf_fake", "HF_HUB_OFFLINE": "1"},  # this machine: the Hub is off
    {"HF_TOKEN": "hf_fake", "HF_HUB_OFFLINE": "0", "HF_ENDPOINT": f"http://127.0.0.1:{_closed_port()}"},
])
def test_unreachable_hub_is_checked_before_anything_is_written(session, tmp_path, env):
    before = _tree(session)
    res = run_export([session, "--to", tmp_path / "out", "--push-to-hub", "me/model"], tmp_path, env)
    _assert_refused(res, "cannot be reached")
    assert "nothing was uploaded" in res.stderr and "hf_fake" not in res.stderr
    assert not (tmp_path / "out").exists() and _tree(session) == before
