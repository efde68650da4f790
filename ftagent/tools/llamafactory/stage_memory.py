"""Training memory per stage (issue 40), on top of the SFT estimate of :mod:`.memory`.

Each stage changes two terms of the estimate (same rule-of-thumb constants, one GPU's memory):

* **the reference model** (static): DPO and KTO compare with the start model. With LoRA it is the same
  weights with the adapter disabled (llamafactory 0.9.5 ``train/trainer_utils.py`` create_ref_model returns
  None for LoRA; ``train/dpo/trainer.py`` then runs the policy under ``disable_adapter()``): nothing more.
  Full-parameter DPO/KTO load a second, frozen copy: 2 bytes per parameter (bf16), sharded like the policy
  under ZeRO-3 (``prepare_deepspeed``). ORPO and SimPO have no reference. GRPO has one only at ``beta > 0``
  (TRL 0.24 ``GRPOConfig.beta`` defaults to 0.0: "the reference model is not loaded"), kept the same way.
* **sequences per example** (activations and logits): a preference pair is two sequences (chosen and
  rejected, concatenated into one batch: ``concatenated_forward``), a KTO example two (the answer and its KL
  pair); a GRPO step holds a whole group of ``num_generations`` completions of one prompt (plus generation's
  KV cache, far below the training activations per token, so the training pass is the peak).

``max_seq_len`` is then the longest *single sequence* (prompt + answer) at the stage's smallest batch: one
pair, one KTO example, one GRPO group.
"""

from __future__ import annotations

from pydantic import BaseModel

from ftagent.core.stage_specs import stage_spec
from ftagent.tools.llamafactory.memory import (
    GB,
    MIN_SEQ,
    RESERVED_GB,
    USABLE_FRACTION,
    Method,
    ModelSpec,
    _params_text,
    _per_token_bytes,
    _size_text,
    _static_bytes,
)

REFERENCE_BYTES = 2.0  # a frozen bf16 copy of the weights, per parameter
SEQUENCES = {"sft": 1, "dpo": 2, "orpo": 2, "simpo": 2, "kto": 2}
METHODS: tuple[Method, ...] = ("full_gc", "lora")
GRPO_GENERATIONS = 8  # TRL 0.24 GRPOConfig.num_generations default


class StageEstimate(BaseModel):
    """One stage × method verdict."""

    stage: str
    method: Method
    fits: bool
    static_gb_per_gpu: float  # weights + optimizer (+ reference) per device
    reference_gb_per_gpu: float
    sequences: int  # sequences held per step at the smallest batch
    max_seq_len: int  # tokens of one sequence


def _reference(stage: str, method: Method, params: int, num_gpus: int, grpo_beta: float) -> float:
    spec = stage_spec(stage)
    needs = (stage in ("dpo", "kto")) or (spec.trainer == "trl" and grpo_beta > 0)
    if not needs or method in ("lora", "qlora"):
        return 0.0  # LoRA: the adapter disabled is the reference
    return REFERENCE_BYTES * params / max(1, num_gpus)


def stage_estimate(model: ModelSpec, stage: str, method: Method, per_gpu_gb: float, num_gpus: int = 1, *,
                   lora_rank: int = 64, num_generations: int = GRPO_GENERATIONS, grpo_beta: float = 0.0) -> StageEstimate:
    """The memory verdict of ``stage`` trained with ``method`` (see the module docstring)."""
    static = _static_bytes(model, method, num_gpus, lora_rank)
    ref = _reference(stage, method, model.params, num_gpus, grpo_beta)
    sequences = num_generations if stage_spec(stage).trainer == "trl" else SEQUENCES[stage]
    usable = USABLE_FRACTION * per_gpu_gb * GB - RESERVED_GB * GB
    per_token = _per_token_bytes(model, method) * sequences
    free = usable - static - ref
    max_seq = max(int(free // per_token), 0) if free > 0 else 0
    return StageEstimate(stage=stage, method=method, fits=max_seq >= MIN_SEQ, static_gb_per_gpu=round((static + ref) / GB, 6),
                         reference_gb_per_gpu=round(ref / GB, 6), sequences=sequences, max_seq_len=max_seq)


def stage_table(model: ModelSpec, stages: list[str], per_gpu_gb: float, num_gpus: int = 1, *,
                device: str = "gpu") -> str:
    """A markdown table of every enabled stage × (full, LoRA): fits, memory per device, longest sequence."""
    lines = ["## Memory per stage",
             f"- {model.name}, {_params_text(model.params_b)} parameters, {num_gpus} × {per_gpu_gb:.0f} GB ({device}); "
             "per device at the smallest batch (one pair, one KTO example, one GRPO group of "
             f"{GRPO_GENERATIONS})",
             "", "| stage | method | fits | weights + optimizer + reference | reference | sequences per step "
                 "| max seq_len of one sequence |", "|---|---|---|---|---|---|---|"]
    for stage in stages:
        for method in METHODS:
            e = stage_estimate(model, stage, method, per_gpu_gb, num_gpus)
            lines.append(f"| {stage} | {'full' if method == 'full_gc' else method} | {'yes' if e.fits else 'no'} | "
                         f"{_size_text(e.static_gb_per_gpu)} | {_size_text(e.reference_gb_per_gpu) if e.reference_gb_per_gpu else '-'} "
                         f"| {e.sequences} | {e.max_seq_len:,} |")
    lines.append("- GRPO's reference is loaded only with beta > 0; LoRA stages use the start weights with the adapter "
                 "disabled as their reference (no second copy).")
    return "\n".join(lines)
