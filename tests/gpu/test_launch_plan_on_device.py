"""Issue 42 on a GPU: what the launch plan assumes about the machine, checked on the machine (GPU only).

No GPU was lent to the session that wrote the plan's rules; these confirm them where one is:

* NVML's total memory is the number ``configs/gpu_profiles.yaml`` holds for this GPU (the plan made from
  the GPU's name and the session's own plan must count the same bytes);
* a tool process numbers the GPUs in PCI order (``CUDA_DEVICE_ORDER=PCI_BUS_ID``), as NVML does;
* vLLM's KV-cache memory at start-up (its log line "Available KV cache memory: X GiB") is at least what
  the plan counted (``LaunchPlan.kv_memory_gb``): a plan that says a length fits must start. The numbers
  are printed for the record (the plan's allowance ``SERVING_OVERHEAD_GB`` is an estimate).
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu


def test_nvml_total_is_the_profile_of_this_gpu() -> None:
    from ftagent.core.hardware import detect_gpus
    from ftagent.tools.launch.profiles import _key, gpu_table

    info = detect_gpus()
    gpu = info.gpus[0]
    hits = [v for k, v in gpu_table().items() if k in _key(gpu.name)]
    if not hits:
        pytest.skip(f"{gpu.name} is not in configs/gpu_profiles.yaml")
    entry = max(hits, key=lambda v: len(_key(v["name"])))
    print(f"NVML: {gpu.name} {gpu.memory_total_bytes} bytes ({gpu.memory_total_bytes / 2**20:.0f} MiB); "
          f"profile {entry['name']}: {entry['nvml_mib']} MiB")
    assert gpu.memory_total_bytes == pytest.approx(int(entry["nvml_mib"]) * 2**20, rel=0.01)


def test_tool_processes_number_gpus_in_pci_order(tools_env: Path, tmp_path: Path) -> None:
    from ftagent.runners.local import LocalRunner

    script = "import os, torch; print('ORDER', os.environ.get('CUDA_DEVICE_ORDER'), torch.cuda.get_device_name(0))"
    res = LocalRunner(tools_env, gpu=True).run(["python", "-c", script], tool="train", workdir=tmp_path, timeout=300,
                                               log_file=tmp_path / "order.log")
    assert res.ok and "ORDER PCI_BUS_ID" in (tmp_path / "order.log").read_text()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_vllm_finds_at_least_the_kv_memory_the_plan_counts(tiny_model: Path, tmp_path: Path, monkeypatch) -> None:
    from ftagent.core.hardware import detect_gpus
    from ftagent.core.settings import load_settings
    from ftagent.runners.vllmenv import vllm_available, vllm_env_path, vllm_serve_argv
    from ftagent.tools.launch.plan import launch_plan
    from ftagent.tools.launch.profiles import profile_of

    env = vllm_env_path(load_settings())
    if not vllm_available(env):
        pytest.skip(f"no vLLM env at {env}")
    config = json.loads((tiny_model / "config.json").read_text(encoding="utf-8"))
    profile = profile_of(detect_gpus()).model_copy(update={"gpu_count": 1})
    plan = launch_plan(config, profile, name="builtin/tiny-qwen2",
                       inference={"max_seq_len": 512, "gpu_memory_utilization": 0.5, "tensor_parallel_size": 1})
    log = tmp_path / "vllm.log"
    argv = vllm_serve_argv(env, tiny_model, port=_free_port(), max_model_len=512, gpu_memory_utilization=0.5)
    with log.open("w") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env={
            "CUDA_VISIBLE_DEVICES": "0", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"})
    try:
        found = None
        deadline = time.time() + 240
        while time.time() < deadline and proc.poll() is None and found is None:
            time.sleep(2)
            found = re.search(r"Available KV cache memory: ([\d.]+) GiB", log.read_text(errors="replace"))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    assert found, log.read_text(errors="replace")[-3000:]
    vllm_gb = float(found.group(1)) * 2**30 / 1e9
    print(f"KV memory: vLLM {vllm_gb:.2f} GB, the plan {plan.kv_memory_gb:.2f} GB "
          f"(GPU {profile.memory_gb:.2f} GB, utilization 0.5)")
    assert plan.kv_memory_gb <= vllm_gb  # the plan never promises more than vLLM finds
