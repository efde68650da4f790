"""Issue 30 finding 10: the shipped DeepSpeed configs parse, and ZeRO-3 CPU offload keeps the
Trainer's torch AdamW instead of DeepSpeedCPUAdam, whose JIT build needs ninja and a C++ compiler that
neither the tool envs nor the image have (configs/deepspeed/README.md has the upstream lines)."""

from __future__ import annotations

import json

import pytest

from ftagent.core.paths import config_file
from ftagent.tools.llamafactory.memory import DEEPSPEED_CONFIGS, DS_Z3_OFFLOAD


@pytest.mark.parametrize("name", DEEPSPEED_CONFIGS)
def test_shipped_configs_parse(name: str) -> None:
    cfg = json.loads(config_file("deepspeed", name).read_text(encoding="utf-8"))
    assert cfg["zero_optimization"]["stage"] in (2, 3)


def _offloads_optimizer(cfg: dict) -> bool:
    return cfg["zero_optimization"].get("offload_optimizer", {}).get("device", "none") != "none"


def test_cpu_offload_does_not_force_deepspeed_cpu_adam() -> None:
    cfg = json.loads(config_file("deepspeed", DS_Z3_OFFLOAD).read_text(encoding="utf-8"))
    assert _offloads_optimizer(cfg)
    # accelerate 1.11 (accelerator.py:2276-2285) swaps in DeepSpeedCPUAdam exactly when this is true:
    will_swap = _offloads_optimizer(cfg) and cfg.get("zero_force_ds_cpu_optimizer", True)
    assert not will_swap
    assert cfg["zero_force_ds_cpu_optimizer"] is False  # DeepSpeed's default is True (runtime/constants.py)
