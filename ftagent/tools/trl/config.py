"""The GRPO stage's ``train.yaml``: keys checked against TRL's own ``GRPOConfig``, system keys injected.

A GRPO config is flat like a LLaMA-Factory one: TRL ``GRPOConfig`` fields (its dataclass, read from the tool
env into the catalogue: ``LFCatalogue.grpo_parameters``) plus the model keys the planner knows from
LLaMA-Factory (:data:`OWN_KEYS`: ``finetuning_type`` lora|full, ``lora_*``, ``cutoff_len`` → TRL's
``max_prompt_length``, ``format_reward_weight``). Anything else is dropped with the reason. The system sets
the paths (start weights, output, data), the precision, and the generation engine: on GPUs vLLM in TRL's
colocate mode when the tool env has the vLLM version TRL supports (:func:`vllm_preflight`), transformers
generation otherwise (always on CPU).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ftagent.core.hardware import HardwareInfo
from ftagent.tools.launch.profiles import precision_config, profile_of
from ftagent.tools.llamafactory.catalogue import LFCatalogue
from ftagent.tools.llamafactory.config import DATA_FILE, DroppedKey, ManagedConfig, _shape_ok, training_output
from ftagent.tools.llamafactory.defaults import load_lf_defaults
from ftagent.tools.llamafactory.planner_keys import EMPTY_REASON, REFUSED_REASON, is_empty, planner_may_set

#: LLaMA-Factory-style keys the GRPO script reads itself (ftagent/tools/trl/grpo_script.py MODEL_KEYS)
OWN_KEYS = ("stage", "finetuning_type", "lora_rank", "lora_alpha", "lora_dropout", "lora_target", "template",
            "cutoff_len", "format_reward_weight", "max_samples")
METHODS = ("lora", "full")
#: the vLLM version TRL 0.24 accepts (trl/import_utils.py is_vllm_available)
TRL_VLLM_VERSION = "0.10.2"
DEFAULT_VLLM_MEMORY = 0.3  # TRL's GRPOConfig default: the policy trains on the same GPUs
SYSTEM = {"report_to": "none", "save_only_model": True, "overwrite_output_dir": True, "remove_unused_columns": False,
          "log_completions": False, "push_to_hub": False,
          "save_safetensors": True}  # the integrity guard reads safetensors (issue 39's false flag)
CPU = {"use_cpu": True, "bf16": False, "fp16": False, "gradient_checkpointing": False, "use_vllm": False,
       "dataloader_num_workers": 0}
#: the paths the system sets in every GRPO run (manage_grpo_config); with SYSTEM, CPU and the generation plan,
#: the keys the filter passes for the manager to replace
PATH_KEYS = ("model_name_or_path", "output_dir", "dataset_dir", "dataset_file")
VLLM_PLAN = ("use_vllm", "vllm_mode", "vllm_gpu_memory_utilization")
MICRO = {"max_steps": 2, "logging_steps": 1, "save_strategy": "no", "max_samples": 8, "num_train_epochs": 1}


def filter_grpo_config(config: dict[str, Any], catalogue: LFCatalogue) -> tuple[dict[str, Any], list[DroppedKey]]:
    """Keep the keys TRL's ``GRPOConfig`` or the GRPO script know, that a plan may set, with values of an
    acceptable shape. A key naming a file, a folder, an account or a server is dropped, ``refused`` when it has a
    value (the same rule as LLaMA-Factory's keys: :mod:`ftagent.tools.llamafactory.planner_keys`)."""
    text = frozenset(load_lf_defaults().text_keys)
    system = frozenset({*SYSTEM, *CPU, *PATH_KEYS, *VLLM_PLAN, "stage"})
    kept: dict[str, Any] = {}
    dropped: list[DroppedKey] = []
    for key, value in config.items():
        name = str(key)
        if name in OWN_KEYS:
            if name == "finetuning_type" and str(value) not in METHODS:
                dropped.append(DroppedKey(key=name, reason=f"the GRPO stage trains {' or '.join(METHODS)}"))
                continue
            kept[name] = ",".join(map(str, value)) if isinstance(value, list) else value
            continue
        param = catalogue.grpo_parameters.get(name)
        if param is None:
            dropped.append(DroppedKey(key=name, reason=f"unknown to TRL {catalogue.trl_version or ''} GRPOConfig".strip()))
            continue
        if not planner_may_set(name, param, text_keys=text, system_keys=system):
            empty = is_empty(value)
            dropped.append(DroppedKey(key=name, reason=EMPTY_REASON if empty else REFUSED_REASON, refused=not empty))
            continue
        if not _shape_ok(value, param.accepts_mapping, param.accepts_list):
            dropped.append(DroppedKey(key=name, reason=f"not a valid value for type {param.type}"))
            continue
        kept[name] = value
    return kept, dropped


def vllm_preflight(config: dict[str, Any], *, gpu_count: int, vllm_version: str | None) -> list[str]:
    """Why TRL would refuse ``use_vllm`` here ([] = it can run): TRL 0.24 ``is_vllm_available`` wants vLLM
    0.10.2 in the training env; colocate mode needs ``vllm_tensor_parallel_size`` to divide the world size
    (``GRPOTrainer.__init__``); vLLM needs a GPU."""
    if not config.get("use_vllm"):
        return []
    problems = []
    if gpu_count == 0:
        problems.append("use_vllm needs a GPU (generation runs through transformers on CPU)")
    if vllm_version is None:
        problems.append("the tool env has no vLLM (TRL generates with it only when installed)")
    elif vllm_version != TRL_VLLM_VERSION:
        problems.append(f"TRL supports vLLM {TRL_VLLM_VERSION} only, the tool env has {vllm_version}")
    if str(config.get("vllm_mode", "colocate")) not in ("colocate", "server"):
        problems.append(f"vllm_mode must be colocate or server, got {config.get('vllm_mode')}")
    tp = int(config.get("vllm_tensor_parallel_size") or 1)
    if gpu_count and gpu_count % tp:
        problems.append(f"vllm_tensor_parallel_size {tp} must divide the {gpu_count} GPUs (colocate mode)")
    return problems


def group_problem(config: dict[str, Any], n_devices: int = 1) -> str | None:
    """GRPOConfig's own batch rule (trl/trainer/grpo_config.py ``__post_init__``) checked before any run:
    the generation batch (per-device batch × devices × gradient accumulation) must hold whole groups."""
    n = int(config.get("num_generations") or 8)
    if n < 2:
        return f"num_generations must be at least 2 (GRPO compares answers within a group), got {n}"
    batch = int(config.get("per_device_train_batch_size") or 8) * max(1, n_devices)
    batch *= int(config.get("gradient_accumulation_steps") or 1)
    if batch % n:
        return (f"the generation batch (per_device_train_batch_size × devices × gradient_accumulation_steps = {batch}) "
                f"must be divisible by num_generations ({n})")
    return None


def manage_grpo_config(config: dict[str, Any], *, workspace: Path, start_path: str, hardware: HardwareInfo,
                       vllm_version: str | None = None) -> ManagedConfig:
    """Inject the system keys into a filtered GRPO config (paths, precision, the generation engine)."""
    workspace = Path(workspace).absolute()
    forced: dict[str, Any] = {**SYSTEM, "stage": "grpo", "model_name_or_path": str(start_path),  # PATH_KEYS
                              "output_dir": str(training_output(workspace)), "dataset_dir": str(workspace),
                              "dataset_file": DATA_FILE}
    notes: list[str] = []
    final = dict(config)
    final.setdefault("finetuning_type", "lora")  # LoRA by default (issue 40)
    if hardware.gpu_count == 0:
        forced.update(CPU)
    else:
        forced.update(precision_config(profile_of(hardware).precision))
        want = final.get("use_vllm", True)
        plan = {"use_vllm": bool(want), "vllm_mode": final.get("vllm_mode", "colocate"),
                "vllm_gpu_memory_utilization": final.get("vllm_gpu_memory_utilization", DEFAULT_VLLM_MEMORY)}
        refused = vllm_preflight({**final, **plan}, gpu_count=hardware.gpu_count, vllm_version=vllm_version)
        if refused:
            plan = {"use_vllm": False}
            notes.append("generation through transformers, not vLLM: " + "; ".join(refused))
        forced.update(plan)
    injected = sorted(k for k, v in forced.items() if final.get(k, object()) != v)
    final.update(forced)
    return ManagedConfig(config=final, injected=injected, env={}, notes=notes)


def micro_grpo_config(config: dict[str, Any], debug_dir: Path) -> dict[str, Any]:
    """The validate step's short run: two optimizer steps on a few prompts, output in ``debug_dir``."""
    micro = {**config, **MICRO, "output_dir": str(Path(debug_dir).absolute() / "output")}
    n = int(micro.get("num_generations") or 8)
    micro["per_device_train_batch_size"] = max(n, int(micro.get("per_device_train_batch_size") or n) // n * n)
    micro["gradient_accumulation_steps"] = 1
    micro.pop("warmup_ratio", None)
    return micro
