"""``ftagent plan`` with the real tool env: a real training probe and baseline on demo_add + tiny-qwen2."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


@pytest.fixture
def workdir(tmp_path, monkeypatch, tools_env):
    """An isolated FT_FILE_PATH / LOG_PATH / WORKSPACE_PATH with the shared tool env."""
    monkeypatch.chdir(tmp_path)
    for key in ("CHAT_MODEL", "OPENAI_API_KEY", "OPENAI_API_BASE", "FT_PLANNER"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("FT_FILE_PATH", str(tmp_path / "files"))
    monkeypatch.setenv("LOG_PATH", str(tmp_path / "log"))
    monkeypatch.setenv("WORKSPACE_PATH", str(tmp_path / "ws"))
    monkeypatch.setenv("FT_TOOLS_ENV", str(tools_env))
    monkeypatch.setenv("FT_ENV_TYPE", "local")
    return tmp_path


def _plan(*args: str, command: str = "plan") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ftagent", command, *args], capture_output=True,
                          text=True, env=os.environ.copy(), timeout=900)


def test_plan_measures_and_prints_without_a_session(workdir):
    done = _plan("--benchmark", "demo_add", "--base-model", "builtin/tiny-qwen2", "--loop-n", "2", "--timeout", "30m")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for part in ("baseline", "loop 0", "loop 1", "total", "s/step", "items x", "LLM: 0 calls", "--timeout 30 min"):
        assert part in out, (part, out)
    assert not (workdir / "log").exists()  # no session was created
    cache = json.loads((workdir / "files" / "forecast" / "probes.json").read_text())
    train = next(v for k, v in cache.items() if k.startswith("train:"))
    evaluation = next(v for k, v in cache.items() if k.startswith("eval:"))
    assert 0 < train["s_per_step"] < 60 and math.isfinite(train["startup_s"]) and train["steps"] >= 5
    assert evaluation["items"] > 0 and evaluation["s_per_item"] > 0 and evaluation["fixed_s"] > 0
    # `llm_finetune --plan` is the same forecast; cached: no new probe, and still no session
    again = _plan("--benchmark", "demo_add", "--base-model", "builtin/tiny-qwen2", "--loop-n", "2", "--timeout", "30m",
                  "--plan", command="llm_finetune")
    assert again.returncode == 0, again.stdout + again.stderr
    assert all(part in again.stdout for part in ("loop 0", "loop 1", "total", "--timeout 30 min")), again.stdout
    after = json.loads((workdir / "files" / "forecast" / "probes.json").read_text())
    # nothing measured before was measured again; a new entry only where the machine's load band changed between the
    # two runs (the cache keys by load band, and under CI's parallel tests the 1-min load can cross a band)
    assert {k: after[k] for k in cache} == cache
    new = {k: v for k, v in after.items() if k not in cache}
    assert all(v["load"] != train["load"] for v in new.values()), (train["load"], new)
    assert not (workdir / "log").exists()


def test_plan_bad_input_exits_2(workdir):
    done = _plan("--benchmark", "no_such_benchmark", "--base-model", "builtin/tiny-qwen2")
    assert done.returncode == 2, done.stdout + done.stderr
    assert not (workdir / "log").exists() and not (Path(workdir) / "files" / "forecast").exists()
    resume = _plan("--path", str(workdir / "nowhere"), "--plan", command="llm_finetune")
    assert resume.returncode == 2 and "--plan forecasts a new session" in resume.stderr, resume.stdout + resume.stderr
