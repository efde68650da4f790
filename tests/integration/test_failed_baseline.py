"""A baseline that cannot be evaluated ends the session `env_error` with one clear error and exit 1 —
through the real CLI, scenario and OpenCompass backend choice (issue #22.5: the row was unit-tested only).

The failure is real and cheap: ``FT_EVAL_BACKEND=vllm`` forces vLLM on a machine without a GPU, which the
backend choice refuses (StepError ENV) before OpenCompass starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def test_a_failed_baseline_ends_the_session_env_error_with_exit_1(tmp_path, tools_env):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FT_", "CHAT_", "OPENAI_"))}
    env.update({"PYTHONPATH": str(REPO), "FT_FILE_PATH": str(tmp_path / "files"), "LOG_PATH": str(tmp_path / "log"),
                "WORKSPACE_PATH": str(tmp_path / "ws"), "FT_TOOLS_ENV": str(tools_env), "FT_ENV_TYPE": "local",
                "FT_BENCHMARK_LIMIT": "4", "FT_PLANNER": "heuristic", "FT_EVAL_BACKEND": "vllm",
                "CUDA_VISIBLE_DEVICES": ""})
    proc = subprocess.run([sys.executable, "-m", "ftagent", "llm_finetune", "--benchmark", "demo_add",
                           "--base-model", "builtin/tiny-qwen2", "--loop-n", "1", "--quiet"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "baseline" in errors[0].lower() and "vllm" in proc.stderr.lower(), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    (session,) = (tmp_path / "log").iterdir()
    events = [json.loads(line) for line in (session / "events.jsonl").read_text().splitlines()]
    end = [e for e in events if e["type"] == "session_end"]
    assert end and end[-1]["status"] == "env_error", end
    assert not any(e["type"] == "hypothesis" for e in events)  # no loop ran on a baseline that does not exist
