"""How a LLaMA-Factory run is launched on GPUs: DeepSpeed config, torchrun, the visible GPU set.

The memory plan (:mod:`ftagent.tools.llamafactory.memory`) names the DeepSpeed config each method
needs; :func:`apply_deepspeed` makes the validated ``train.yaml`` use exactly that one, so the memory
table the planner saw and the run agree:

* the plan names a config (full fine-tuning over several GPUs: ZeRO-3; a full fine-tune that only
  fits with CPU offload: ZeRO-3 offload) -> it is copied into the workspace and ``deepspeed:`` is
  set to its absolute path, whatever the planner wrote;
* the plan names none -> a planner's choice of one of the shipped configs (``ds_z2_config.json``
  for LoRA over several GPUs, say) is kept (copied likewise); anything else is removed with a note;
* no GPU -> ``deepspeed`` is removed (DeepSpeed needs CUDA);
* a planner's ZeRO-3 offload where the plan does not allow offload (:mod:`ftagent.tools.launch.offload`)
  -> ZeRO-3 without offload (offload nobody asked for is not run).

The offload config's ``zero_force_ds_cpu_optimizer`` is written from the plan: true (DeepSpeed's default:
DeepSpeedCPUAdam) where the tool env has the CPU Adam op built, false (the Trainer's torch AdamW on the
CPU) where offload was only asked for (``configs/deepspeed/README.md``).

The copy lives in the workspace because the workspace is mounted at the same path in every runner
(a Docker container does not see ftagent's package data).

:func:`launch_env` gives the torchrun variables: LLaMA-Factory refuses DeepSpeed without
``FORCE_TORCHRUN=1`` even on one GPU, and over several GPUs ``NPROC_PER_NODE`` must be the number
of GPUs this run may use (the task's ``CUDA_VISIBLE_DEVICES`` set), not all GPUs of the node.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from ftagent.core.hardware import HardwareInfo
from ftagent.core.paths import config_file
from ftagent.tools.llamafactory.memory import (
    DEEPSPEED_CONFIGS,
    DS_Z3,
    DS_Z3_OFFLOAD,
    MemoryReport,
    planned_deepspeed,
)


def deepspeed_source(name: str) -> Path:
    """The shipped ``configs/deepspeed/<name>``."""
    return config_file("deepspeed", name)


def _gpu_count(hardware: HardwareInfo | dict[str, Any] | None) -> int:
    if hardware is None:
        return 0
    if isinstance(hardware, dict):
        hardware = HardwareInfo.model_validate(hardware)
    return hardware.gpu_count


def _shipped_name(value: Any) -> str | None:
    """``ds_z3_config.json`` for any value naming a shipped config (bare name, examples/ path, our copy)."""
    if not isinstance(value, str) or not value.strip():
        return None
    name = Path(value.strip()).name
    return name if name in DEEPSPEED_CONFIGS else None


def choose_deepspeed(config: dict[str, Any], *, memory: dict[str, Any] | None,
                     gpu_count: int) -> tuple[str | None, list[str]]:
    """The shipped DeepSpeed config a run of ``config`` gets (None: none), with a note per change.

    The memory plan's config for the method wins; else a planner's own choice of a shipped one; a
    ZeRO-3 offload the plan does not allow becomes ZeRO-3; no GPU: none.
    """
    notes: list[str] = []
    asked = config.get("deepspeed")
    if gpu_count == 0:
        if asked:
            notes.append(f"removed deepspeed={asked}: no GPU (DeepSpeed needs CUDA)")
        return None, notes
    rest = {k: v for k, v in config.items() if k != "deepspeed"}
    planned = planned_deepspeed(memory, rest)
    chosen = planned or _shipped_name(asked)
    report = MemoryReport.model_validate(memory) if memory else None
    if asked and planned and _shipped_name(asked) != planned:
        notes.append(f"deepspeed set to {planned} (the memory plan for this method) instead of {asked}")
    elif asked and not chosen:
        notes.append(f"removed deepspeed={asked}: not one of the shipped configs {', '.join(DEEPSPEED_CONFIGS)}")
    elif planned and not asked:
        notes.append(f"deepspeed: {planned} (the memory plan for this method)")
    if chosen == DS_Z3_OFFLOAD and not (report and report.offload_allowed):
        notes.append(f"deepspeed set to {DS_Z3} instead of {DS_Z3_OFFLOAD}: CPU offload is not allowed here "
                     "(FT_CPU_OFFLOAD is off and DeepSpeed's CPU Adam is not built)")
        chosen = DS_Z3
    return chosen, notes


def apply_deepspeed(config: dict[str, Any], *, memory: dict[str, Any] | None,
                    hardware: HardwareInfo | dict[str, Any] | None, workspace: Path) -> tuple[dict[str, Any], list[str]]:
    """Set (or remove) ``deepspeed`` in a managed config according to the memory plan
    (:func:`choose_deepspeed`), the chosen config copied into ``workspace``.

    Args:
        config: the config after filtering and system-managed injection (not modified).
        memory: ``ScenarioInfo.memory`` (a :class:`MemoryReport` as JSON), may be empty.
        hardware: ``ScenarioInfo.hardware``.
        workspace: the loop's workspace; the chosen config is copied there.

    Returns:
        ``(config, notes)``: the new config and one note per change the planner should know about.
    """
    chosen, notes = choose_deepspeed(config, memory=memory, gpu_count=_gpu_count(hardware))
    final = {k: v for k, v in config.items() if k != "deepspeed"}
    if chosen:
        target = Path(workspace).absolute() / chosen
        report = MemoryReport.model_validate(memory) if memory else None
        _write_config(chosen, target, cpu_adam=bool(report and report.cpu_adam))
        final["deepspeed"] = str(target)
    return final, notes


def _write_config(name: str, target: Path, *, cpu_adam: bool) -> None:
    """The shipped config into the workspace; the offload one with the optimizer the tool env can run."""
    if name != DS_Z3_OFFLOAD:
        shutil.copyfile(deepspeed_source(name), target)
        return
    cfg = json.loads(deepspeed_source(name).read_text(encoding="utf-8"))
    cfg["zero_force_ds_cpu_optimizer"] = cpu_adam  # accelerate accelerator.py _prepare_deepspeed reads it
    target.write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")


def launch_env(hardware: HardwareInfo | dict[str, Any] | None, config: dict[str, Any]) -> dict[str, str]:
    """torchrun variables for ``llamafactory-cli train`` with this config on this hardware.

    ``FORCE_TORCHRUN=1`` and ``NPROC_PER_NODE=<visible GPUs>`` with several GPUs or any DeepSpeed
    config; nothing on CPU or for a plain single-GPU run. (A multi-node Ray trial overrides this with
    ``USE_RAY=1`` / ``FORCE_TORCHRUN=0``, :mod:`ftagent.jobs.ray_training`.)
    """
    n = _gpu_count(hardware)
    if n == 0 or (n == 1 and not config.get("deepspeed")):
        return {}
    return {"FORCE_TORCHRUN": "1", "NPROC_PER_NODE": str(n)}


def visible_gpus(hardware: HardwareInfo | dict[str, Any] | None) -> str | None:
    """The ``gpus`` argument for the runner: this process's ``CUDA_VISIBLE_DEVICES`` as it was seen
    (a task's GPU set from ``tasks.json``), None for "all GPUs" or no GPU."""
    if hardware is None:
        return None
    value = hardware.get("cuda_visible_devices") if isinstance(hardware, dict) else hardware.cuda_visible_devices
    return value if value and _gpu_count(hardware) > 0 else None
