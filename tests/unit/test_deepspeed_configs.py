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


# Issue 42 item 6: every key of a shipped config is one DeepSpeed 0.19 reads (configs/envs/tools-gpu.txt pins
# 0.19.8). Top level: deepspeed/runtime/config.py DeepSpeedConfig._initialize_params reads each through a
# getter; a key no getter asks for is ignored without a word (d350dfe shipped "comms_config" and
# "monitor_config": the attribute names DeepSpeedConfig stores its own parsing under, not config keys —
# comm/config.py DeepSpeedCommsConfig reads "comms_logger", monitor/config.py get_monitor_config reads
# "tensorboard", "wandb", "csv_monitor", "comet").
TOP_LEVEL_READ = {
    "train_batch_size": "runtime/config.py get_train_batch_size",
    "train_micro_batch_size_per_gpu": "runtime/config.py get_train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps": "runtime/config.py get_gradient_accumulation_steps",
    "gradient_clipping": "runtime/config.py get_gradient_clipping",
    "zero_allow_untested_optimizer": "runtime/config.py get_zero_allow_untested_optimizer",
    "zero_force_ds_cpu_optimizer": "runtime/config.py get_zero_force_ds_cpu_optimizer",
    "fp16": "runtime/config.py get_float16_config -> runtime/precision_config.py DeepSpeedFP16Config",
    "bf16": "runtime/config.py get_bfloat16_config -> runtime/precision_config.py DeepSpeedBF16Config",
    "zero_optimization": "runtime/config.py get_zero_config -> runtime/zero/config.py DeepSpeedZeroConfig",
}
# The nested sections are pydantic models with extra="forbid" (runtime/config_utils.py DeepSpeedConfigModel):
# their field names or aliases, as far as the shipped files use them.
FP16_FIELDS = {"enabled", "auto_cast", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
               "consecutive_hysteresis", "min_loss_scale"}  # runtime/precision_config.py DeepSpeedFP16Config
BF16_FIELDS = {"enabled", "immediate_grad_update", "check_grad_overflow"}  # DeepSpeedBF16Config
ZERO_FIELDS = {  # runtime/zero/config.py DeepSpeedZeroConfig (stage3_* are the aliases)
    "stage", "contiguous_gradients", "reduce_scatter", "reduce_bucket_size", "allgather_partitions",
    "allgather_bucket_size", "overlap_comm", "offload_param", "offload_optimizer", "sub_group_size",
    "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold", "stage3_max_live_parameters",
    "stage3_max_reuse_distance", "stage3_gather_16bit_weights_on_model_save", "round_robin_gradients"}
OFFLOAD_FIELDS = {"device", "pin_memory"}  # runtime/zero/offload_config.py DeepSpeedZeroOffload*Config


@pytest.mark.parametrize("name", DEEPSPEED_CONFIGS)
def test_shipped_configs_carry_only_keys_deepspeed_reads(name: str) -> None:
    cfg = json.loads(config_file("deepspeed", name).read_text(encoding="utf-8"))
    assert set(cfg) <= set(TOP_LEVEL_READ), set(cfg) - set(TOP_LEVEL_READ)
    assert set(cfg["fp16"]) <= FP16_FIELDS and set(cfg["bf16"]) <= BF16_FIELDS
    zero = cfg["zero_optimization"]
    assert set(zero) <= ZERO_FIELDS, set(zero) - ZERO_FIELDS
    for section in ("offload_param", "offload_optimizer"):
        assert set(zero.get(section, {})) <= OFFLOAD_FIELDS
