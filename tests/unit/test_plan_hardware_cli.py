"""``ftagent plan --hardware SPEC`` (issue 30, "What to build" 3): the launch plan with no GPU, no baseline
and no training probe; a bad SPEC is one clear error, exit 2. Runs the real CLI in a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).parents[2]
QWEN7B = REPO / "tests" / "fixtures" / "model_configs" / "Qwen__Qwen2.5-7B" / "config.json"


def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FT_", "CHAT_", "OPENAI_"))}
    env.update({"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "FT_FILE_PATH": str(cwd / "files"),
                "CUDA_VISIBLE_DEVICES": ""})
    return subprocess.run([sys.executable, "-m", "ftagent", "plan", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "qwen7b"
    folder.mkdir()
    shutil.copy(QWEN7B, folder / "config.json")  # the folder holds only config.json
    return folder


def test_done_when_8xh100_qwen25_7b_json(tmp_path: Path, model_dir: Path) -> None:
    res = _cli(["--hardware", "8xH100", "--base-model", str(model_dir), "--benchmark", "aime25", "--json"], tmp_path)
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    for key in ("tensor_parallel_size", "max_model_len", "precision", "finetuning_type", "deepspeed",
                "per_gpu_memory_gb", "max_cutoff_len", "preflight"):
        assert key in plan, key
    assert 28 % plan["tensor_parallel_size"] == 0
    assert plan["max_model_len"] <= plan["model_context_len"] and plan["precision"] == "bf16"
    assert all(v["status"] in ("ok", "fixed") for v in plan["preflight"])
    assert not (tmp_path / "files" / "forecast").exists()  # no probe, no baseline measured


def test_text_output_and_bad_spec(tmp_path: Path, model_dir: Path) -> None:
    res = _cli(["--hardware", "1xV100", "--base-model", str(model_dir)], tmp_path)
    assert res.returncode == 0, res.stderr
    assert "fp16" in res.stdout and "preflight:" in res.stdout and "[ok] tensor_parallel_size" in res.stdout
    bad = _cli(["--hardware", "8xB999", "--base-model", str(model_dir)], tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("error:") == 1 and "Traceback" not in bad.stderr
    assert "--hardware" in bad.stderr and "8xB999" in bad.stderr


def test_refused_plan_prints_and_exits_2(tmp_path: Path, model_dir: Path) -> None:
    """A T4 cannot hold Qwen2.5-7B's 16-bit weights for vLLM: the plan is printed, the status is 2."""
    res = _cli(["--hardware", "1xT4", "--base-model", str(model_dir), "--json"], tmp_path)
    assert res.returncode == 2
    assert [v["rule"] for v in json.loads(res.stdout)["preflight"] if v["status"] == "refused"] == ["vllm.memory"]


def test_folder_without_config_is_exit_2(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    res = _cli(["--hardware", "2xL40S", "--base-model", str(tmp_path / "empty")], tmp_path)
    assert res.returncode == 2 and "config.json" in res.stderr and "Traceback" not in res.stderr


def test_hub_id_offline_fetches_only_config_json_and_says_so(tmp_path: Path) -> None:
    """An HF id: only config.json is fetched; offline that is one clear environment error (exit 1)."""
    res = _cli(["--hardware", "8xH100", "--base-model", "Qwen/Qwen2.5-7B-Instruct"], tmp_path)
    assert res.returncode == 1 and "config.json" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "files" / "models").exists()  # no model download started


@pytest.mark.parametrize("spec", ["99999999999999999999xH100", "4097xH100", "0xH100", "9" * 5000 + "xH100"])
def test_gpu_count_past_the_maximum_is_exit_2_at_once(tmp_path: Path, model_dir: Path, spec: str) -> None:
    """Issue 43: a 20-digit count looped to the GPU count in vllm_rules.choose_tensor_parallel (never returned
    on d350dfe); a count above MAX_GPU_COUNT is one error naming the maximum."""
    res = _cli(["--hardware", spec, "--base-model", str(model_dir)], tmp_path)
    assert res.returncode == 2 and "COUNT from 1 to 4096" in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr) < 2000  # the 5,000-digit spec is not echoed whole


def test_tensor_parallel_search_is_bounded_by_the_heads() -> None:
    from ftagent.tools.launch.plan import launch_plan
    from ftagent.tools.launch.profiles import parse_hardware_spec

    plan = launch_plan(json.loads(QWEN7B.read_text(encoding="utf-8")), parse_hardware_spec("4096xH100"))
    assert plan.tensor_parallel_size == 1 and plan.data_parallel_size == 4096


def test_ram_option(tmp_path: Path, model_dir: Path) -> None:
    """Issue 42 item 1: --ram gives the host's RAM; without it the plan says offload is not considered."""
    res = _cli(["--hardware", "1xA10G", "--base-model", str(model_dir), "--json"], tmp_path)
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    assert plan["cpu_ram_gb"] is None and "RAM unknown: offload not considered (--ram GB)" in plan["notes"]
    assert plan["per_gpu_memory_gb"] == pytest.approx(23028 * 2**20 / 1e9)  # NVML's total, as a session reads it
    res = _cli(["--hardware", "1xA10G", "--base-model", str(model_dir), "--ram", "1024"], tmp_path)
    assert res.returncode == 0, res.stderr
    assert "host RAM: 1024 GB" in res.stdout and "CPU offload not considered" in res.stdout
    assert "deepspeed none" in res.stdout  # 1 TB of RAM, but nobody asked for offload
    bad = _cli(["--hardware", "1xA10G", "--base-model", str(model_dir), "--ram", "-5"], tmp_path)
    assert bad.returncode == 2 and "--ram" in bad.stderr and "Traceback" not in bad.stderr
    alone = _cli(["--ram", "64", "--base-model", str(model_dir)], tmp_path)
    assert alone.returncode == 2 and "--hardware" in alone.stderr
