"""The preflight: upstream's refusal rules applied to a launch plan before any GPU work (issue 30).

Each rule names the setting and the upstream file it comes from. A verdict is ``ok``, ``fixed`` (the
plan already carries the one right answer: the TP size), ``warning`` or ``refused``; :func:`check_plan`
turns refusals into one :class:`UserInputError` (exit 2, nothing started).

Upstream versions: LLaMA-Factory 0.9.5 and transformers 4.57.6 as pinned in the tool env
(``configs/envs/tools.lock.txt``), vLLM as pinned in ``configs/envs/vllm.txt``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from ftagent.core.errors import UserInputError
from ftagent.tools.launch.profiles import BF16_MIN_CAPABILITY, HardwareProfile
from ftagent.tools.launch.train_rules import RULES, TrainLaunch, fired, zero_stage
from ftagent.tools.llamafactory.memory import method_of_config
from ftagent.tools.opencompass import vllm_rules

# The plan is a ftagent.tools.launch.plan.LaunchPlan; it is not imported here (plan imports this module).
LaunchPlan = Any

class Verdict(BaseModel):
    """One preflight rule on one plan."""

    rule: str = Field(description="short id: vllm.tensor_parallel_size, lf.deepspeed_gpu ...")
    setting: str = Field(description="the setting the rule is about")
    status: Literal["ok", "fixed", "refused", "warning"]
    message: str
    source: str = Field(description="the upstream file (and line or function) the rule comes from")


LF_PARSER = "LLaMA-Factory 0.9.5 src/llamafactory/hparams/parser.py"
TF_ARGS = "transformers 4.57.6 src/transformers/training_args.py:1743 TrainingArguments.__post_init__"


def _verdict(rule: str, setting: str, problems: list[str], ok: str, source: str, *,
             status_on_problem: str = "refused") -> Verdict:
    if problems:
        return Verdict(rule=rule, setting=setting, status=status_on_problem, message="; ".join(problems),
                       source=source)
    return Verdict(rule=rule, setting=setting, status="ok", message=ok, source=source)


def _vllm_verdicts(plan: LaunchPlan, model_config: dict[str, Any], use_dora: bool) -> list[Verdict]:
    cc = plan.compute_capability if plan.gpu_count else None
    lora = plan.lora_rank if plan.finetuning_type == "lora" else None
    out = []
    checks = [
        ("vllm.tensor_parallel_size", "tensor_parallel_size",
         dict(tensor_parallel_size=plan.tensor_parallel_size, max_model_len=None, dtype="auto"),
         f"{plan.tensor_parallel_size} divides the attention and KV heads",
         "vllm/config/model.py ModelConfig.verify_with_parallel_config"),
        ("vllm.max_model_len", "max_model_len",
         dict(tensor_parallel_size=1, max_model_len=plan.max_model_len, dtype="auto"),
         f"{plan.max_model_len} <= the model's context {plan.model_context_len}",
         "vllm/config/model.py _get_and_verify_max_len"),
        ("vllm.dtype", "vllm dtype", dict(tensor_parallel_size=1, max_model_len=None, dtype=plan.vllm_dtype,
                                          compute_capability=cc),
         f"{plan.vllm_dtype} runs on compute capability {cc}",
         "vllm/v1/worker/gpu_worker.py _check_if_gpu_supports_dtype; vllm/config/model.py _check_valid_dtype"),
        ("vllm.lora", "lora_rank / max_lora_rank / use_dora",
         dict(tensor_parallel_size=1, max_model_len=None, dtype="auto", lora_rank=lora,
              max_lora_rank=plan.max_lora_rank, use_dora=use_dora),
         f"LoRA rank {lora} <= max_lora_rank {plan.max_lora_rank}" if lora else "no adapter is served",
         "vllm/lora/peft_helper.py PEFTHelper.validate_legal; vllm/config/lora.py MaxLoRARanks"),
    ]
    for rule, setting, kwargs, ok, source in checks:
        out.append(_verdict(rule, setting, vllm_rules.refusals(model_config, **kwargs), ok, source))
    out.append(_memory_verdict(plan))
    if plan.tensor_parallel_fixed_from is not None and out[0].status == "ok":
        out[0] = Verdict(rule=out[0].rule, setting=out[0].setting, status="fixed", source=out[0].source,
                         message=f"{plan.tensor_parallel_fixed_from} (models.yaml) does not divide the heads: "
                                 f"{plan.tensor_parallel_size} instead")
    return out


KV_SOURCE = ("vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory; vllm/v1/worker/gpu_worker.py "
             "Worker.determine_available_memory")


def _memory_verdict(plan: LaunchPlan) -> Verdict:
    """vLLM starts only when one ``max_model_len`` sequence's KV cache fits ``utilization x memory`` minus
    the profiled peak (weights at the served dtype, one forward pass, the sampler): refused when even
    :data:`vllm_rules.MIN_SERVE_LEN` tokens do not fit, fixed when ``max_model_len`` was lowered to fit."""
    rule, setting = "vllm.memory", "max_model_len / tensor_parallel_size / GPU memory"
    share = plan.weights_gb / max(1, plan.tensor_parallel_size)
    usable = plan.per_gpu_memory_gb * plan.gpu_memory_utilization
    if not plan.gpu_count or not plan.max_model_len:
        return Verdict(rule=rule, setting=setting, status="ok", message="no GPU: nothing served by vLLM",
                       source=KV_SOURCE)
    facts = (f"{share:.1f} GB of {plan.vllm_dtype} weights per GPU at TP {plan.tensor_parallel_size} leave "
             f"{max(plan.kv_memory_gb, 0.0):.2f} GB of vLLM's {usable:.1f} GB for the KV cache")
    if plan.kv_memory_gb <= 0 or plan.kv_cache_gb > plan.kv_memory_gb:
        return Verdict(rule=rule, setting=setting, status="refused", source=KV_SOURCE, message=(
            f"{facts}; one {plan.max_model_len:,}-token sequence needs {plan.kv_cache_gb:.2f} GB, and fewer than "
            f"{vllm_rules.MIN_SERVE_LEN:,} tokens would fit: vLLM stops at start-up ('No available memory for the "
            "cache blocks' / 'To serve at least one request with the models's max seq len'); more GPUs (a larger "
            "TP) or a larger GPU"))
    if plan.max_model_len_wanted:
        return Verdict(rule=rule, setting=setting, status="fixed", source=KV_SOURCE, message=(
            f"{facts}: {plan.max_model_len_wanted:,} tokens (models.yaml) do not fit one sequence's KV cache, "
            f"max_model_len {plan.max_model_len:,} does ({plan.kv_cache_gb:.2f} GB)"))
    return Verdict(rule=rule, setting=setting, status="ok", source=KV_SOURCE,
                   message=f"{facts}; one {plan.max_model_len:,}-token sequence needs {plan.kv_cache_gb:.2f} GB")


def _training_verdicts(plan: LaunchPlan, config: dict[str, Any]) -> list[Verdict]:
    bf16 = bool(config.get("bf16", plan.precision == "bf16"))
    cc = plan.compute_capability
    problems = []
    if bf16 and plan.gpu_count and cc is not None and tuple(cc) < BF16_MIN_CAPABILITY:
        problems.append(f"bf16: true on compute capability {cc[0]}.{cc[1]} (< 8.0): \"Your setup doesn't "
                        "support bf16/gpu.\"; use fp16")
    out = [_verdict("lf.bf16", "bf16", problems, f"precision {plan.precision}", TF_ARGS)]
    deepspeed = config.get("deepspeed", plan.deepspeed)
    out.append(_verdict(
        "lf.deepspeed_gpu", "deepspeed",
        [f"deepspeed={deepspeed} without a GPU: DeepSpeed needs CUDA and a torchrun launch (\"Please use "
         "`FORCE_TORCHRUN=1` to launch DeepSpeed training.\")"] if deepspeed and not plan.gpu_count else [],
        f"deepspeed {deepspeed or 'not used'}", f"{LF_PARSER}:354 get_train_args"))
    quant = config.get("quantization_bit", plan.quantization_bit)
    ftype = config.get("finetuning_type", plan.finetuning_type)
    problems = []
    if quant and ftype not in ("lora", "oft"):
        problems.append(f"quantization_bit={quant} with finetuning_type={ftype}: \"Quantization is only "
                        "compatible with the LoRA or OFT method.\"")
    if quant and not plan.gpu_count:
        problems.append(f"quantization_bit={quant} without a GPU: bitsandbytes 4-bit needs CUDA")
    out.append(_verdict("lf.quantization", "quantization_bit", problems, f"quantization_bit {quant}",
                        f"{LF_PARSER}:190 _verify_model_args"))
    est = plan.memory.get(plan.method)
    out.append(_verdict("ftagent.memory", "finetuning_type", [] if est.fits else [
        f"no fine-tuning method fits {plan.hardware.spec} (best: {plan.method}, {est.max_seq_len} tokens at "
        f"batch 1, {plan.static_gb_per_gpu} GB static per GPU)"],
        f"{plan.method}: cutoff_len up to {plan.max_cutoff_len}", "ftagent/tools/llamafactory/memory.py (estimate)"))
    cutoff = config.get("cutoff_len")
    longest = _longest_cutoff(plan, config)
    if cutoff and str(cutoff).isdigit() and int(cutoff) > longest:
        out.append(_verdict("ftagent.cutoff_len", "cutoff_len", [
            f"cutoff_len={cutoff} above the longest that fits {method_of_config(config) if config else plan.method} "
            f"at batch 1 ({longest}): expect CUDA OOM or a truncated context"], "",
            "ftagent/tools/llamafactory/memory.py (estimate)", status_on_problem="warning"))
    return out


def _longest_cutoff(plan: LaunchPlan, config: dict[str, Any]) -> int:
    """The longest cutoff_len of the config's own method (the plan's when the config names none)."""
    if not config.get("finetuning_type"):
        return int(plan.max_cutoff_len)
    longest = plan.memory.get(method_of_config(config)).max_seq_len
    return min(longest, plan.model_context_len) if plan.model_context_len else longest


def train_config_verdicts(plan: LaunchPlan | None, config: dict[str, Any], *, gpus: HardwareProfile) -> list[Verdict]:
    """The verdicts on one ``train.yaml`` as it will run (the validator's final config: system-managed keys and
    the DeepSpeed config in it): the training rules of the session's ``plan`` (bf16, DeepSpeed without GPU,
    quantization, cutoff_len; skipped without a plan) and upstream's refusals of its keys
    (:mod:`~ftagent.tools.launch.train_rules`) on ``gpus``."""
    stage = zero_stage(config.get("deepspeed"))
    launch = TrainLaunch(gpu_count=gpus.gpu_count, compute_capability=gpus.compute_capability if gpus.gpu_count
                         else None, zero_stage=stage, distributed=gpus.gpu_count > 1 or stage > 0)
    out = [v for v in _training_verdicts(plan, config) if v.rule != "ftagent.memory"] if plan is not None else []
    broken = fired(config, launch)
    out += [Verdict(rule=r.rule, setting=r.setting, status="refused", message=f"\"{r.words}\"; {r.advice}",
                    source=r.source) for r in broken]
    if not broken:
        out.append(Verdict(rule="train.yaml", setting="train.yaml", status="ok", source="ftagent/tools/launch/"
                           "train_rules.py", message=f"none of upstream's {len(RULES)} refusals of train.yaml keys "
                           f"applies (ZeRO stage {stage or 'none'}, {gpus.gpu_count} GPU(s))"))
    return out


def preflight(plan: LaunchPlan, model_config: dict[str, Any], *, config: dict[str, Any] | None = None,
              use_dora: bool = False) -> list[Verdict]:
    """Every rule's verdict on ``plan`` (and on a ``train.yaml`` ``config`` when given: its bf16,
    deepspeed, quantization and cutoff_len override the plan's)."""
    return _vllm_verdicts(plan, model_config, use_dora) + _training_verdicts(plan, config or {})


def check_plan(plan: LaunchPlan) -> None:
    """Raise one :class:`UserInputError` naming every refused setting (exit 2, nothing started)."""
    refused = plan.refused
    if refused:
        lines = "; ".join(f"{v.setting}: {v.message} ({v.source})" for v in refused)
        raise UserInputError(f"the launch plan for {plan.model} on {plan.hardware.spec} would be refused "
                             f"upstream: {lines}")
