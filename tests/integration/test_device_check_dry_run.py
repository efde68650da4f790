"""The GPU device check's ``--dry-run`` on CPU: every step up to the GPU calls, with the real tool env.

The GPU steps themselves are in tests/gpu/test_device_check.py (skipped without a GPU).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "tests" / "gpu" / "run_device_check.sh"


def _run(tmp_path: Path, env_dir: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DEVICE_CHECK_ENV": str(env_dir), "DEVICE_CHECK_DRIVER": sys.executable,
           "DEVICE_CHECK_WORK": str(tmp_path / "work"), **extra}
    env.pop("OUT", None)
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=900,
                          check=False)


def test_dry_run_passes_every_step_before_the_gpu(tools_env: Path, tmp_path: Path) -> None:
    out = tmp_path / "check.json"
    proc = _run(tmp_path, tools_env, "--dry-run", "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    found = json.loads(out.read_text())
    assert found["dry_run"] is True and found["preflight"]["llamafactory"] == "0.9.5"
    assert set(found["steps_s"]) >= {"preflight", "build model", "data", "tokenize", "ftagent full", "by hand full",
                                     "ftagent lora", "by hand lora", "eval hf"}
    assert 10 < found["tokens_per_sample"] <= found["cutoff_len"]
    for method in ("full", "lora"):
        ours = found["training"][method]["ftagent"]
        assert ours["config"]["finetuning_type"] == method and ours["config"]["bf16"] is True
        assert Path(ours["micro_batch_call"]["cmd"][0]).name == "llamafactory-cli"
        assert Path(found["training"][method]["hand"]["yaml"]).is_file()
        assert found["memory"][method]["estimate_gb"] > 0 and found["memory"][method]["launch"] == "1 GPU"
    assert found["eval"]["hf"]["check"] and found["eval"]["hf"]["vocab"] == 512
    assert "vllm" in found["eval"]


def test_missing_prerequisite_is_one_line_and_exit_2(tmp_path: Path) -> None:
    proc = _run(tmp_path, tmp_path / "no-env", "--dry-run", DEVICE_CHECK_WHEELS=str(tmp_path / "no-wheels"))
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("device check: missing the wheelhouse"), proc.stderr
    (tmp_path / "empty-env" / "bin").mkdir(parents=True)  # a venv without LLaMA-Factory's trainer
    (tmp_path / "empty-env" / "bin" / "llamafactory-cli").write_text("#!/bin/sh\n")
    (tmp_path / "empty-env" / "bin" / "llamafactory-cli").chmod(0o755)
    proc = _run(tmp_path, tmp_path / "empty-env", "--dry-run")
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("device check: missing no python at")


def test_cpu_smoke_runs_the_real_steps(tools_env: Path, tmp_path: Path) -> None:
    """Every non-GPU code path of the real run (training through ftagent and by hand, HF generation,
    the JSON), on CPU with the tiny model and 5 steps; CUDA numbers are absent, not faked."""
    out = tmp_path / "smoke.json"
    proc = _run(tmp_path, tools_env, "--cpu-smoke", "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    found = json.loads(out.read_text())
    assert found["cpu_smoke"] and not found["dry_run"] and found["max_steps"] == 5
    for method in ("full", "lora"):
        row = found["training"][method]
        assert row["ftagent_tokens_per_s"] > 0 and row["hand_tokens_per_s"] > 0 and row["final_loss"] > 0
        assert found["memory"][method]["launch"] == "CPU" and found["memory"][method]["nvml_peak_gb_hand"] is None
    hf = found["eval"]["hf"]
    assert hf["device"] == "cpu" and hf["items"] == 32 and 0 <= hf["accuracy"] <= 1
