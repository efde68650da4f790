"""Issue 30 finding 5: on GPUs the system sets mixed precision (bf16 from compute capability 8.0, else
fp16); before, nothing set it and full fine-tuning ran fp32 under ZeRO-3."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftagent.core.hardware import GPUInfo, HardwareInfo
from ftagent.tools.launch.profiles import capability_of_name, mixed_precision, profile_of
from ftagent.tools.llamafactory.config import manage_config


def _gpus(name: str, n: int = 2, capability=None) -> HardwareInfo:
    return HardwareInfo(gpus=[GPUInfo(index=i, name=name, memory_total_gb=79.0, memory_used_gb=0.0,
                                      compute_capability=capability) for i in range(n)])


@pytest.mark.parametrize("hardware, bf16, fp16", [
    (_gpus("NVIDIA H100 80GB HBM3", capability=(9, 0)), True, False),
    (_gpus("NVIDIA A100-SXM4-80GB"), True, False),  # NVML gave no capability: from the name table
    (_gpus("Tesla V100-SXM2-32GB", capability=(7, 0)), False, True),
    (_gpus("Tesla T4"), False, True),
    (HardwareInfo(), False, False),  # CPU: as before (cpu-recipes §4.1)
])
def test_precision_is_injected(tmp_path: Path, hardware: HardwareInfo, bf16: bool, fp16: bool) -> None:
    planner = {"finetuning_type": "full", "bf16": False, "fp16": True, "learning_rate": 1e-5}
    managed = manage_config(planner, workspace=tmp_path, base_model_path="/m", hardware=hardware, n_samples=10)
    assert managed.config["bf16"] is bf16 and managed.config["fp16"] is fp16
    if hardware.gpu_count and bf16:
        assert "bf16" in managed.injected


def test_profile_of_detected_gpus() -> None:
    assert capability_of_name("NVIDIA A100-SXM4-40GB") == (8, 0)
    assert capability_of_name("NVIDIA L40S") == (8, 9)
    assert capability_of_name("Some New GPU") is None
    unknown = profile_of(_gpus("Some New GPU"))
    assert unknown.capability_assumed and unknown.compute_capability == (8, 0)
    assert mixed_precision(None) == "fp32" and mixed_precision((7, 5)) == "fp16" and mixed_precision((8, 6)) == "bf16"
