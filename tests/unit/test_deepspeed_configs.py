"""Issue 30 finding 10 and issue 42 item 1: the shipped DeepSpeed configs parse; ZeRO-3 CPU offload runs
DeepSpeedCPUAdam only where the tool env has it built (its JIT build needs ninja and a C++ compiler that
neither the tool envs nor the image have), the Trainer's torch AdamW otherwise (configs/deepspeed/README.md
has the upstream lines)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ftagent.core.paths import config_file
from ftagent.tools.llamafactory.memory import DEEPSPEED_CONFIGS, DS_Z3_OFFLOAD


@pytest.mark.parametrize("name", DEEPSPEED_CONFIGS)
def test_shipped_configs_parse(name: str) -> None:
    cfg = json.loads(config_file("deepspeed", name).read_text(encoding="utf-8"))
    assert cfg["zero_optimization"]["stage"] in (2, 3)


def _offloads_optimizer(cfg: dict) -> bool:
    return cfg["zero_optimization"].get("offload_optimizer", {}).get("device", "none") != "none"


def _offload_report(*, asked: bool, cpu_adam: bool) -> dict:
    from ftagent.tools.launch.offload import OffloadPolicy
    from ftagent.tools.llamafactory.memory import estimate_memory, model_spec

    policy = OffloadPolicy(asked=asked, cpu_adam=cpu_adam)
    report = estimate_memory(model_spec("Qwen2.5-7B"), 24, 1, cpu_ram_gb=512, offload_allowed=policy.allowed,
                             cpu_adam=policy.cpu_adam)
    return report.model_dump(mode="json")


@pytest.mark.parametrize(("asked", "cpu_adam"), [(True, False), (False, True), (True, True)])
def test_the_offload_optimizer_is_the_one_the_tool_env_can_run(tmp_path, asked: bool, cpu_adam: bool) -> None:
    """Issue 42 item 1: the shipped offload config keeps DeepSpeed's default (zero_force_ds_cpu_optimizer
    unset: true); the workspace copy says true only where DeepSpeed's CPU Adam is built (accelerate
    accelerator.py _prepare_deepspeed swaps in DeepSpeedCPUAdam exactly then), else false (torch AdamW)."""
    from ftagent.core.hardware import GPUInfo, HardwareInfo
    from ftagent.tools.llamafactory.launch import apply_deepspeed

    shipped = json.loads(config_file("deepspeed", DS_Z3_OFFLOAD).read_text(encoding="utf-8"))
    assert _offloads_optimizer(shipped) and "zero_force_ds_cpu_optimizer" not in shipped
    hw = HardwareInfo(gpus=[GPUInfo(index=0, name="NVIDIA A10G", memory_total_gb=22.49, memory_used_gb=0)])
    final, _ = apply_deepspeed({"finetuning_type": "full"}, memory=_offload_report(asked=asked, cpu_adam=cpu_adam),
                               hardware=hw, workspace=tmp_path)
    copy = json.loads(Path(final["deepspeed"]).read_text(encoding="utf-8"))
    assert Path(final["deepspeed"]).name == DS_Z3_OFFLOAD and copy["zero_force_ds_cpu_optimizer"] is cpu_adam


def test_offload_nobody_allowed_is_not_run(tmp_path) -> None:
    from ftagent.core.hardware import GPUInfo, HardwareInfo
    from ftagent.tools.llamafactory.launch import apply_deepspeed
    from ftagent.tools.llamafactory.memory import DS_Z3

    hw = HardwareInfo(gpus=[GPUInfo(index=i, name="NVIDIA A10G", memory_total_gb=22.49, memory_used_gb=0)
                            for i in range(2)])
    final, notes = apply_deepspeed({"finetuning_type": "lora", "deepspeed": "ds_z3_offload_config.json"},
                                   memory=_offload_report(asked=False, cpu_adam=False), hardware=hw,
                                   workspace=tmp_path)
    assert Path(final["deepspeed"]).name == DS_Z3 and any("CPU offload is not allowed" in n for n in notes)


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
