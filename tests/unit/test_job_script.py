"""job/run_ft_job.sh: validation (exit 2), --dry-run plan, and a real tmux run with a fake ftagent."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "job" / "run_ft_job.sh"
pytestmark = pytest.mark.skipif(not (shutil.which("jq") and shutil.which("bash")), reason="needs bash and jq")

FAKE = """#!/usr/bin/env bash
printf '%s\\n' "$@" > "$LOG_PATH/argv.txt"
env > "$LOG_PATH/env.txt"
echo "fake ftagent ran"
exit 3
"""


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    fake = tmp_path / "fake-ftagent"
    if not fake.exists():
        fake.write_text(FAKE)
        fake.chmod(0o755)
    # the script makes `ftagent job run`'s task check, which refuses a Hub id it cannot download when
    # HF_HUB_OFFLINE is set: these plans are checked as on a machine that can download
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FT_", "TMUX")) and k != "HF_HUB_OFFLINE"}
    env.update(FTAGENT_BIN=str(fake), FTAGENT_PYTHON=sys.executable, TMUX_TMPDIR=str(tmp_path),
               FT_JOB_LOG_BASE=str(tmp_path / "log"), FT_JOB_WORKSPACE_BASE=str(tmp_path / "ws"), **extra)
    return env


def _run(tmp_path: Path, tasks, *args: str, env=None) -> subprocess.CompletedProcess:
    path = tmp_path / "tasks.json"
    path.write_text(tasks if isinstance(tasks, str) else json.dumps(tasks))
    return subprocess.run(["bash", str(SCRIPT), *args, str(path)], cwd=tmp_path, env=env or _env(tmp_path),
                          capture_output=True, text=True, timeout=60)


TWO_TASKS = {"tasks": [
    {"model": "builtin/tiny-qwen2", "benchmark": "demo_add", "gpus": "0", "port": 8011, "loop_n": 2,
     "timeout": "10m"},
    {"model": "Qwen/Qwen2.5-7B-Instruct", "benchmark": "aime25", "gpus": "1,2", "scenario": "be 'careful'"},
]}


def test_dry_run_prints_plan_and_starts_nothing(tmp_path):
    res = _run(tmp_path, TWO_TASKS, "--dry-run", "--job-id", "dry1")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "tmux session: ftjob-dry1" in out
    assert "== task 0: demo_add_tiny-qwen2 ==" in out and "== task 1: aime25_Qwen2.5-7B-Instruct ==" in out
    assert "window:  ftjob-dry1:demo_add_tiny-qwen2" in out
    assert "  CUDA_VISIBLE_DEVICES=1,2" in out and "  OPENAI_API_BASE=http://localhost:8011" in out
    assert f"  LOG_PATH={tmp_path}/log/dry1/demo_add_tiny-qwen2/" in out
    assert f"log:     {tmp_path}/log/dry1/aime25_Qwen2.5-7B-Instruct.log" in out
    assert "llm_finetune --benchmark demo_add --base-model builtin/tiny-qwen2 --timeout 10m" in out
    assert "--loop-n 2" in out and "--user-target-scenario 'be '\"'\"'careful'\"'\"''" in out
    assert "--benchmark-description 'Bundled synthetic benchmark" in out  # default: the benchmark YAML's description
    assert out.count("OPENAI_API_BASE") == 1
    assert not (tmp_path / "log").exists()


@pytest.mark.parametrize("tasks, message", [
    ({"tasks": [{"benchmark": "demo_add"}]}, "task 0: 'model' is required"),
    ({"tasks": [{"model": "m/x"}]}, "task 0: 'benchmark' is required"),
    ({"tasks": [{"model": "m/x", "benchmark": "aime2"}]}, "unknown benchmark 'aime2'. Did you mean 'aime25'"),
    ({"tasks": [{"model": "m/x", "benchmark": "demo_add", "gpu": "0"}]}, "task 0: unknown key 'gpu'. Did you mean 'gpus'?"),
    ({"tasks": [{"model": "m/a", "benchmark": "demo_add", "gpus": "0,1"},
                {"model": "m/b", "benchmark": "aime25", "gpus": "1"}]}, "task 0 and task 1 share GPU(s) 1"),
    ({"tasks": [{"model": "m/a", "benchmark": "demo_add", "gpus": "a"}]}, "comma-separated list of GPU"),
    ({"tasks": [{"model": "m/a", "benchmark": "demo_add", "timeout": "12x"}]}, "invalid timeout '12x'"),
    ({"tasks": []}, "at least one task"),
    ('{"tasks": [', "not valid JSON"),
    # issue 43: CUDA_VISIBLE_DEVICES=0,0 is no two GPUs (was accepted by both job runners)
    ({"tasks": [{"model": "m/a", "benchmark": "demo_add", "gpus": "0,0"}]}, "names GPU 0 more than once"),
    ({"tasks": [{"model": "m/a", "benchmark": "demo_add", "gpus": "1, 2,1"}]}, "names GPU 1 more than once"),
])
def test_bad_tasks_files_exit_2(tmp_path, tasks, message):
    res = _run(tmp_path, tasks, "--dry-run")
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert message in res.stderr and res.stdout == ""
    path = str(tmp_path / "tasks.json")
    # issue 43: the tasks.json path once per error line (was "error: …/tasks.json: …/tasks.json: not valid JSON")
    assert all(line.count(path) == 1 for line in res.stderr.splitlines() if line.startswith("error:")), res.stderr


@pytest.mark.parametrize("tasks, message", [
    ({"tasks": [{"model": "builtin/tiny-qwen2", "benchmark": "demo_add", "gpus": "0,0"}]}, "names GPU 0 more than once"),
    ('{"tasks": [', "not valid JSON"),
    (None, "no such file"),
])
def test_ftagent_job_run_refuses_them_naming_the_file_once(tmp_path, monkeypatch, tasks, message):
    """The other job runner (``ftagent job run``): the same refusal, the path once (issue 43)."""
    from typer.testing import CliRunner

    from ftagent.cli.main import app

    path = tmp_path / "tasks.json"
    if tasks is not None:
        path.write_text(tasks if isinstance(tasks, str) else json.dumps(tasks))
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["job", "run", str(path), "--dry-run", "--log-base", str(tmp_path / "log")])
    assert res.exit_code == 2 and message in res.output, res.output
    errors = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert errors and all(line.count(str(path)) == 1 for line in errors), res.output
    assert not (tmp_path / "log").exists()


def test_usage_errors_exit_2(tmp_path):
    res = subprocess.run(["bash", str(SCRIPT), "--bogus"], capture_output=True, text=True, env=_env(tmp_path))
    assert res.returncode == 2 and "unknown option --bogus" in res.stderr
    res = _run(tmp_path, TWO_TASKS, "--job-id", "bad id")
    assert res.returncode == 2 and "--job-id 'bad id'" in res.stderr


@pytest.mark.skipif(not shutil.which("tmux"), reason="needs tmux")
def test_real_run_in_tmux(tmp_path):
    job_id = f"t{uuid.uuid4().hex[:8]}"
    session = f"ftjob-{job_id}"
    env = _env(tmp_path)
    try:
        res = _run(tmp_path, TWO_TASKS, "--job-id", job_id, env=env)
        assert res.returncode == 0, res.stderr
        windows = subprocess.run(["tmux", "list-windows", "-t", f"={session}", "-F", "#{window_name}"],
                                 env=env, capture_output=True, text=True, check=True).stdout.split()
        assert windows == ["demo_add_tiny-qwen2", "aime25_Qwen2.5-7B-Instruct"]
        job_dir = tmp_path / "log" / job_id
        deadline = time.time() + 30
        while time.time() < deadline and len(list((job_dir / ".run").glob("*.exit"))) < 2:
            time.sleep(0.2)
        for name, gpus, port in (("demo_add_tiny-qwen2", "0", "8011"), ("aime25_Qwen2.5-7B-Instruct", "1,2", None)):
            env_lines = dict(line.split("=", 1) for line in
                             (job_dir / name / "env.txt").read_text().splitlines() if "=" in line)
            assert env_lines["CUDA_VISIBLE_DEVICES"] == gpus
            assert env_lines["LOG_PATH"] == f"{job_dir}/{name}/"
            assert env_lines["WORKSPACE_PATH"] == f"{tmp_path}/ws/{job_id}/{name}"
            assert env_lines.get("OPENAI_API_BASE") == (f"http://localhost:{port}" if port else None)
            log = (job_dir / f"{name}.log").read_text()
            assert "fake ftagent ran" in log and "exit code 3" in log
            assert (job_dir / ".run" / f"{name}.exit").read_text().strip() == "3"
        argv = (job_dir / "aime25_Qwen2.5-7B-Instruct" / "argv.txt").read_text().splitlines()
        assert argv[:8] == ["llm_finetune", "--benchmark", "aime25", "--base-model", "Qwen/Qwen2.5-7B-Instruct",
                            "--timeout", "12h", "--benchmark-description"]
        assert argv[-2:] == ["--user-target-scenario", "be 'careful'"]
        plan = json.loads((job_dir / "job.json").read_text())
        assert plan["tmux_session"] == session and len(plan["tasks"]) == 2
        # a second start with the same job id refuses and leaves the running session alone
        again = _run(tmp_path, TWO_TASKS, "--job-id", job_id, env=env)
        assert again.returncode == 2 and "already exists" in again.stderr
        assert subprocess.run(["tmux", "has-session", "-t", f"={session}"], env=env).returncode == 0
    finally:
        subprocess.run(["tmux", "kill-session", "-t", f"={session}"], env=env, capture_output=True)


def test_example_tasks_file_is_valid():
    from ftagent.jobs.tasks import read_tasks_file

    tasks, errors = read_tasks_file(REPO / "job" / "tasks.json.example")
    assert errors == [] and tasks is not None and len(tasks.tasks) == 3


@pytest.mark.skipif(not shutil.which("tmux"), reason="needs tmux")
def test_a_task_ftagent_job_run_refuses_never_reaches_tmux(tmp_path):
    """Issue 34.8: the script makes `ftagent job run`'s task check (the base model here), exit 2, no tmux."""
    job_id = f"t{uuid.uuid4().hex[:8]}"
    env = _env(tmp_path, FT_FILE_PATH=str(tmp_path / "ft"))
    tasks = {"tasks": [{"model": "builtin/tiny-qwen2", "benchmark": "demo_add"},
                       {"model": str(tmp_path / "no-such-model"), "benchmark": "demo_add"}]}
    try:
        res = _run(tmp_path, tasks, "--job-id", job_id, env=env)
        assert res.returncode == 2, (res.stdout, res.stderr)
        assert "task 1" in res.stderr and "no-such-model" in res.stderr and "Traceback" not in res.stderr
        assert subprocess.run(["tmux", "has-session", "-t", f"=ftjob-{job_id}"], env=env,
                              capture_output=True).returncode != 0
        assert not (tmp_path / "log").exists()
    finally:
        subprocess.run(["tmux", "kill-session", "-t", f"=ftjob-{job_id}"], env=env, capture_output=True)


# Issue 40 (the stages through the job runner): the real script, tmux and `ftagent llm_finetune`'s own option and
# settings resolution; the session itself is replaced (run_finetune records the settings the task's session would
# start with and returns), since a real one costs minutes (baseline evaluation, training).
SETTINGS_PROBE = """#!{python}
import json, os, sys
import ftagent.finetune.app as app
from ftagent.core.settings import load_settings

def record(options):
    settings = load_settings(options.settings, target_benchmark=options.benchmark, base_model=options.base_model)
    with open(os.path.join(os.environ["LOG_PATH"], "settings.json"), "w") as fh:
        json.dump({{"stages": settings.ft.stages, "planner": settings.ft.planner}}, fh)
    raise SystemExit(0)

app.run_finetune = record
sys.argv[0] = "ftagent"
from ftagent.cli.main import main
main()
"""
STAGE_TASKS = {"tasks": [
    {"config": "run.yaml"},  # base_model, benchmark and the stages from the run file
    {"model": "Qwen/Qwen2.5-0.5B-Instruct", "benchmark": "demo_add", "loop_n": 1},
]}


def _stage_job(tmp_path: Path, env: dict[str, str]) -> dict[str, dict]:
    job_id = f"t{uuid.uuid4().hex[:8]}"
    try:
        res = _run(tmp_path, STAGE_TASKS, "--job-id", job_id, env=env)
        assert res.returncode == 0, res.stderr
        job_dir = tmp_path / "log" / job_id
        deadline = time.time() + 120
        while time.time() < deadline and len(list((job_dir / ".run").glob("*.exit"))) < 2:
            time.sleep(0.2)
        out = {}
        for name in ("demo_add_tiny-qwen2", "demo_add_Qwen2.5-0.5B-Instruct"):
            assert (job_dir / ".run" / f"{name}.exit").read_text().strip() == "0", (job_dir / f"{name}.log").read_text()
            out[name] = json.loads((job_dir / name / "settings.json").read_text())
        return out
    finally:
        subprocess.run(["tmux", "kill-session", "-t", f"=ftjob-{job_id}"], env=env, capture_output=True)


@pytest.mark.skipif(not shutil.which("tmux"), reason="needs tmux")
def test_a_tasks_stages_reach_its_session_through_the_run_file_and_the_environment(tmp_path):
    probe = tmp_path / "ftagent-probe"
    probe.write_text(SETTINGS_PROBE.format(python=sys.executable))
    probe.chmod(0o755)
    (tmp_path / "run.yaml").write_text("base_model: builtin/tiny-qwen2\nbenchmark: demo_add\nstages: sft,dpo\n"
                                       "planner: heuristic\n")
    env = {**_env(tmp_path, PYTHONPATH=str(REPO), FT_FILE_PATH=str(tmp_path / "ft")), "FTAGENT_BIN": str(probe)}
    seen = _stage_job(tmp_path, env)
    assert seen["demo_add_tiny-qwen2"] == {"stages": ["sft", "dpo"], "planner": "heuristic"}
    assert seen["demo_add_Qwen2.5-0.5B-Instruct"]["stages"] == ["sft", "dpo", "grpo"]  # the default
    # the caller's FT_STAGES is forwarded to every task and beats a run file (flag > environment > run file)
    seen = _stage_job(tmp_path, {**env, "FT_STAGES": "grpo"})
    assert [s["stages"] for s in seen.values()] == [["grpo"], ["grpo"]]
    # a stage the run file misspells stops the job before tmux starts anything
    (tmp_path / "run.yaml").write_text("base_model: builtin/tiny-qwen2\nbenchmark: demo_add\nstages: sft,dpoo\n")
    res = _run(tmp_path, STAGE_TASKS, "--job-id", "typo1", env=env)
    assert res.returncode == 2 and "dpoo" in res.stderr and "dpo" in res.stderr, res.stderr
    assert not (tmp_path / "log" / "typo1").exists()
