"""Issue 32 item 9: `ftagent job run` honours WORKSPACE_PATH, prints its dry run for people (JSON with --json),
and warns when a task's "gpus" cannot be given on this machine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ftagent.cli.main import app
from ftagent.jobs.plan_text import gpu_warnings
from ftagent.jobs.tasks import TasksFile, build_plan

REPO = Path(__file__).resolve().parents[2]
TASK = {"model": "builtin/tiny-qwen2", "benchmark": "demo_add", "gpus": "0,1"}


@pytest.fixture
def job(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FT_FILE_PATH", str(tmp_path / "ft"))
    monkeypatch.delenv("FT_JOB_WORKSPACE_BASE", raising=False)
    monkeypatch.delenv("WORKSPACE_PATH", raising=False)
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps({"tasks": [TASK]}))
    return tasks


def _dry_run(tasks: Path, *extra: str):
    return CliRunner().invoke(app, ["job", "run", str(tasks), "--dry-run", "--job-id", "j1",
                                    "--log-base", str(tasks.parent / "log"), *extra])


def test_workspace_path_is_the_default_workspace_root(job, tmp_path, monkeypatch):
    monkeypatch.setenv("WORKSPACE_PATH", str(tmp_path / "big-disk"))
    res = _dry_run(job, "--json")
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    assert plan["tasks"][0]["env"]["WORKSPACE_PATH"] == str(tmp_path / "big-disk" / "j1" / "demo_add_tiny-qwen2")


def test_workspace_path_from_dot_env(job, tmp_path):
    (tmp_path / ".env").write_text(f"WORKSPACE_PATH={tmp_path / 'from-env-file'}\n")
    plan = json.loads(_dry_run(job, "--json").stdout)
    assert plan["tasks"][0]["workspace_path"].startswith(str(tmp_path / "from-env-file"))


def test_job_workspace_base_still_wins(job, tmp_path, monkeypatch):
    monkeypatch.setenv("WORKSPACE_PATH", str(tmp_path / "big-disk"))
    monkeypatch.setenv("FT_JOB_WORKSPACE_BASE", str(tmp_path / "ws"))
    plan = json.loads(_dry_run(job, "--json").stdout)
    assert plan["tasks"][0]["workspace_path"].startswith(str(tmp_path / "ws"))


def test_dry_run_is_for_people(job, tmp_path):
    res = _dry_run(job)
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert not out.lstrip().startswith("{")
    assert "== task 0: demo_add_tiny-qwen2 ==" in out and "executor:   local" in out
    assert "  CUDA_VISIBLE_DEVICES=0,1" in out and "command:    " in out and "llm_finetune --benchmark demo_add" in out


def test_gpus_this_machine_lacks_are_a_warning(job):
    from ftagent.core.hardware import detect_gpus

    res = _dry_run(job)
    assert res.exit_code == 0
    if detect_gpus(None).gpu_count < 2:
        assert "warning: task 0 (demo_add_tiny-qwen2) asks for GPU(s) 0,1" in res.stderr, res.stderr
    ray = _dry_run(job, "--executor", "ray")  # a cluster's GPUs are not this machine's
    assert "warning" not in ray.stderr


def test_gpu_warnings_name_what_is_missing():
    plan = build_plan(TasksFile.model_validate({"tasks": [TASK, {**TASK, "gpus": "2", "benchmark": "aime25"}]}),
                      job_id="j", log_base=Path("log"), workspace_base=Path("ws"), ftagent_bin="ftagent",
                      descriptions=["", ""])
    none = gpu_warnings(plan, 0, "NVML unavailable")
    assert len(none) == 2 and "this machine has no GPU (NVML unavailable)" in none[0] and "CPU" in none[0]
    two = gpu_warnings(plan, 2)
    assert len(two) == 1 and "task 1" in two[0] and "2 GPU(s) (indices 0-1)" in two[0] and "GPU 2 cannot" in two[0]
    assert gpu_warnings(plan, 3) == []


@pytest.mark.skipif(not (shutil.which("jq") and shutil.which("bash")), reason="needs bash and jq")
def test_job_script_uses_workspace_path_and_shows_the_warning(tmp_path):
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps({"tasks": [{**TASK, "gpus": "7"}]}))
    fake = tmp_path / "fake-ftagent"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FT_", "TMUX", "WORKSPACE_PATH"))}
    env.update(FTAGENT_BIN=str(fake), FTAGENT_PYTHON=sys.executable, FT_JOB_LOG_BASE=str(tmp_path / "log"),
               WORKSPACE_PATH=str(tmp_path / "big-disk"), FT_FILE_PATH=str(tmp_path / "ft"), PYTHONPATH=str(REPO))
    res = subprocess.run(["bash", str(REPO / "job" / "run_ft_job.sh"), "--dry-run", "--job-id", "s1", str(tasks)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert f"WORKSPACE_PATH={tmp_path}/big-disk/s1/demo_add_tiny-qwen2" in res.stdout
    assert "warning: task 0 (demo_add_tiny-qwen2) asks for GPU(s) 7" in res.stderr
