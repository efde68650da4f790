"""Upstream's refusals of a ``train.yaml`` on the session's GPUs: every validated train.yaml passes them.

Issue 42 item 2. The launch plan is checked once, at start-up; these rules look at the train.yaml the
planner writes, as the validator finalised it (system-managed keys injected, the DeepSpeed config the
memory plan names), before the micro-batch runs. Each is a check transformers or LLaMA-Factory makes when
the run starts, so a refusal is certain, never an estimate; several only fire on GPUs (DeepSpeed, ZeRO-3,
bf16) and the micro-batch forces some keys off (``load_best_model_at_end``), so without these rules the
full run on eight GPUs would be the first to die. A refusal is a CONFIG failure whose message is the
rule's words (:func:`refusal_text`).

Upstream versions: transformers 4.57.6 and LLaMA-Factory 0.9.5 (the tool env's, ``configs/envs/tools.lock.txt``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ftagent.tools.launch.profiles import BF16_MIN_CAPABILITY

TF_TRAINER = "transformers 4.57.6 src/transformers/trainer.py Trainer.create_accelerator_and_postprocess"
LF_TRAIN_ARGS = "LLaMA-Factory 0.9.5 src/llamafactory/hparams/parser.py get_train_args"


def _on(config: dict[str, Any], key: str) -> bool:
    value = config.get(key)
    return value is True or str(value).strip().lower() in ("true", "1", "yes")


@dataclass(frozen=True)
class TrainLaunch:
    """How the train.yaml will be launched: the GPUs and the DeepSpeed config the validator chose."""

    gpu_count: int
    compute_capability: tuple[int, int] | None
    zero_stage: int  # 0: no DeepSpeed
    distributed: bool  # torchrun (several GPUs, or any DeepSpeed config: tools/llamafactory/launch.launch_env)


@dataclass(frozen=True)
class TrainRule:
    """One upstream refusal: when it fires, the setting it is about, upstream's words and file."""

    rule: str
    setting: str
    fires: Callable[[dict[str, Any], TrainLaunch], bool]
    words: str  # upstream's message, quoted
    advice: str
    source: str


def _layerwise(config: dict[str, Any]) -> bool:
    return (_on(config, "use_galore") and _on(config, "galore_layerwise")) or (
        _on(config, "use_apollo") and _on(config, "apollo_layerwise"))


def _no_bf16_gpu(launch: TrainLaunch) -> bool:
    cc = launch.compute_capability
    return launch.gpu_count == 0 or cc is None or tuple(cc) < BF16_MIN_CAPABILITY


RULES: tuple[TrainRule, ...] = (
    TrainRule("tf.load_best_model_at_end", "load_best_model_at_end",
              lambda c, lt: lt.zero_stage > 0 and _on(c, "load_best_model_at_end") and _on(c, "save_only_model"),
              "DeepSpeed can't be used with `save_only_model` along with `load_best_model_at_end`.",
              "drop load_best_model_at_end: the system sets save_only_model: true and this run uses DeepSpeed",
              TF_TRAINER),
    TrainRule("tf.auto_find_batch_size", "auto_find_batch_size",
              lambda c, lt: lt.zero_stage == 3 and _on(c, "auto_find_batch_size"),
              "`auto_find_batch_size` isn't supported yet with DeepSpeed Zero-3.",
              "drop auto_find_batch_size and set per_device_train_batch_size (this run uses ZeRO-3)", TF_TRAINER),
    TrainRule("lf.pure_bf16", "pure_bf16",
              lambda c, lt: lt.zero_stage == 3 and _on(c, "pure_bf16"),
              "`pure_bf16` is incompatible with DeepSpeed ZeRO-3.",
              "drop pure_bf16 (this run uses ZeRO-3; bf16 mixed precision is set by the system)", LF_TRAIN_ARGS),
    TrainRule("lf.pure_bf16_device", "pure_bf16",
              lambda c, lt: _on(c, "pure_bf16") and _no_bf16_gpu(lt),
              "This device does not support `pure_bf16`.",
              "drop pure_bf16: it needs a GPU of compute capability 8.0 or newer", LF_TRAIN_ARGS),
    TrainRule("lf.galore_apollo_deepspeed", "use_galore / use_apollo",
              lambda c, lt: lt.zero_stage > 0 and (_on(c, "use_galore") or _on(c, "use_apollo")),
              "GaLore and APOLLO are incompatible with DeepSpeed yet.",
              "drop use_galore/use_apollo (this run uses DeepSpeed), or use LoRA", LF_TRAIN_ARGS),
    TrainRule("lf.predict_with_generate", "predict_with_generate",
              lambda c, lt: lt.zero_stage == 3 and _on(c, "predict_with_generate"),
              "`predict_with_generate` is incompatible with DeepSpeed ZeRO-3.",
              "drop predict_with_generate (this run uses ZeRO-3; evaluation is ftagent's)", LF_TRAIN_ARGS),
    TrainRule("lf.layerwise_distributed", "galore_layerwise / apollo_layerwise",
              lambda c, lt: lt.distributed and _layerwise(c),
              "Distributed training does not support layer-wise GaLore.",
              "drop galore_layerwise/apollo_layerwise (this run is distributed over torchrun)", LF_TRAIN_ARGS),
    TrainRule("lf.badam_distributed", "use_badam / badam_mode",
              lambda c, lt: lt.distributed and _on(c, "use_badam") and (
                  str(c.get("badam_mode", "layer")) == "ratio" or lt.zero_stage != 3),
              "Radio-based BAdam does not yet support distributed training, use layer-wise BAdam. / "
              "Layer-wise BAdam only supports DeepSpeed ZeRO-3 training.",
              "drop use_badam (this distributed run has no ZeRO-3 for layer-wise BAdam)", LF_TRAIN_ARGS),
    TrainRule("lf.pissa_init", "pissa_init",
              lambda c, lt: lt.zero_stage == 3 and _on(c, "pissa_init"),
              "Please use scripts/pissa_init.py to initialize PiSSA in DeepSpeed ZeRO-3.",
              "drop pissa_init (this run uses ZeRO-3)", LF_TRAIN_ARGS),
    TrainRule("lf.use_unsloth", "use_unsloth",
              lambda c, lt: lt.zero_stage == 3 and _on(c, "use_unsloth"),
              "Unsloth is incompatible with DeepSpeed ZeRO-3.", "drop use_unsloth (this run uses ZeRO-3)",
              LF_TRAIN_ARGS),
)


def refusal_text(rule: TrainRule) -> str:
    return f"{rule.setting}: \"{rule.words}\" ({rule.source}); {rule.advice}"


def zero_stage(deepspeed: Any) -> int:
    """The ZeRO stage of a ``deepspeed:`` value: the JSON file it names (0 when none or unreadable)."""
    if not isinstance(deepspeed, str) or not deepspeed.strip():
        return 0
    path = Path(deepspeed.strip())
    if not path.is_file():
        from ftagent.core.paths import config_file

        path = config_file("deepspeed", path.name)
    try:
        return int(json.loads(path.read_text(encoding="utf-8"))["zero_optimization"]["stage"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def fired(config: dict[str, Any], launch: TrainLaunch) -> list[TrainRule]:
    """The rules ``config`` breaks when launched as ``launch``."""
    return [rule for rule in RULES if rule.fires(config, launch)]
