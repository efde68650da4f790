"""The job runner running the REAL ftagent: two demo-size tasks in tmux windows (issue #22.6; the unit
tests use a fake ftagent). Both sessions train and evaluate for real on CPU, sharing one FT_FILE_PATH
(its preparation is serialised by file locks), and `ftagent job status` reads both. The second task's run
file (``config``) sets ``stages: dpo`` (issue 40): its loop is a DPO loop from the base model."""

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

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not (shutil.which("tmux") and shutil.which("jq")), reason="needs tmux and jq")]
REPO = Path(__file__).resolve().parents[2]


def test_two_real_tasks_run_in_tmux_and_report(tmp_path, tools_env):
    wrapper = tmp_path / "ftagent"
    wrapper.write_text(f"#!/usr/bin/env bash\nexec {sys.executable} -m ftagent \"$@\"\n")
    wrapper.chmod(0o755)
    job_id = f"real{uuid.uuid4().hex[:6]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FT_", "TMUX", "CHAT_", "OPENAI_"))}
    env.update(FTAGENT_BIN=str(wrapper), FTAGENT_PYTHON=sys.executable, TMUX_TMPDIR=str(tmp_path),
               PYTHONPATH=str(REPO), FT_JOB_LOG_BASE=str(tmp_path / "log"), FT_JOB_WORKSPACE_BASE=str(tmp_path / "ws"),
               FT_FILE_PATH=str(tmp_path / "files"), FT_TOOLS_ENV=str(tools_env), FT_ENV_TYPE="local",
               FT_PLANNER="heuristic", FT_BENCHMARK_LIMIT="6", FT_UPPER_DATA_SIZE_LIMIT="300")
    tasks = {"tasks": [{"model": "builtin/tiny-qwen2", "benchmark": "demo_add", "loop_n": 1, "timeout": "20m"},
                       {"config": "dpo.yaml", "loop_n": 1, "timeout": "20m", "scenario": "second task"}]}
    (tmp_path / "tasks.json").write_text(json.dumps(tasks))
    (tmp_path / "dpo.yaml").write_text("base_model: builtin/tiny-qwen2\nbenchmark: demo_add\nstages: dpo\n")
    session = f"ftjob-{job_id}"
    try:
        start = subprocess.run(["bash", str(REPO / "job" / "run_ft_job.sh"), "--job-id", job_id, "tasks.json"],
                               cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert start.returncode == 0, start.stderr
        job_dir = tmp_path / "log" / job_id
        deadline = time.time() + 1500
        while time.time() < deadline and len(list((job_dir / ".run").glob("*.exit"))) < 2:
            time.sleep(2)
        exits = {p.stem: p.read_text().strip() for p in (job_dir / ".run").glob("*.exit")}
        logs = "\n".join(p.read_text(errors="replace")[-1500:] for p in job_dir.glob("*.log"))
        assert len(exits) == 2 and set(exits.values()) == {"0"}, (exits, logs)
        reports = [json.loads(p.read_text()) for p in job_dir.glob("*/*/report.json")]
        assert len(reports) == 2 and all(r["baseline_val"] is not None and r["loops"] for r in reports), reports
        # each task's loop trained the stage its settings allow: SFT by default, DPO where the run file says so
        stages = sorted(r["loops"][0]["config"]["stage"] for r in reports)
        assert stages == ["dpo", "sft"], [r["loops"] for r in reports]
        assert all(r["loops"][0]["val_score"] is not None for r in reports), reports
        status = subprocess.run([sys.executable, "-m", "ftagent", "job", "status", str(job_dir)],
                                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert status.returncode == 0, status.stderr
        print(status.stdout)
        task_rows = [line for line in status.stdout.splitlines() if "demo_add_tiny-qwen2" in line]
        assert len(task_rows) == 2, status.stdout
    finally:
        subprocess.run(["tmux", "kill-session", "-t", f"={session}"], env=env, capture_output=True)
