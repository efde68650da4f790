"""The launch plan: from a model's ``config.json`` and a hardware profile, everything a run will launch.

One function, :func:`launch_plan`, answers for training (method, DeepSpeed config, precision, per-GPU
memory, the longest ``cutoff_len`` that fits) and for evaluation (vLLM tensor and data parallelism,
``max_model_len``, dtype, LoRA rank limit), plus the disk a loop needs. It owns no arithmetic of its
own: memory is :mod:`ftagent.tools.llamafactory.memory`'s estimate, TP and the context are
:mod:`ftagent.tools.opencompass.vllm_rules` / :mod:`~ftagent.tools.opencompass.inference`, precision is
:func:`ftagent.tools.launch.profiles.mixed_precision`. The memory estimate assumes 16-bit weights and
mixed-precision AdamW, which is what bf16 and fp16 both give; the plan never runs fp32 on a GPU.

The plan carries its :mod:`~ftagent.tools.launch.preflight` verdicts: ``ftagent plan --hardware`` prints
them, the start-up refuses a plan with a refused verdict before any GPU work (exit 2).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from ftagent.tools.launch.offload import OffloadPolicy
from ftagent.tools.launch.preflight import Verdict, preflight
from ftagent.tools.launch.profiles import HardwareProfile, Precision
from ftagent.tools.llamafactory.memory import (
    GB,
    METHOD_CONFIGS,
    MIN_SEQ,
    DeepSpeedConfig,
    MemoryReport,
    Method,
    estimate_memory,
    lora_params,
    spec_from_config,
)
from ftagent.tools.opencompass import vllm_rules
from ftagent.tools.opencompass.inference import InferenceSettings, inference_settings, weights_gb

# The preferred method first: full fine-tuning when it fits a useful length, else LoRA, else 4-bit LoRA.
METHOD_ORDER: tuple[Method, ...] = ("full_gc", "lora", "qlora")
USEFUL_CUTOFF = 2048  # a method is chosen when it fits this many tokens (or the whole context, if shorter)
MOE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")


class LaunchPlan(BaseModel):
    """What a run of ``model`` launches on ``hardware`` (JSON of ``ftagent plan --hardware --json``)."""

    model: str
    hardware: HardwareProfile
    gpu_count: int
    per_gpu_memory_gb: float = Field(description="GB per GPU the plan counts on")
    compute_capability: tuple[int, int] | None
    precision: Precision = Field(description="bf16 / fp16 training and serving; fp32 only without a GPU")
    params_b: float
    weights_gb: float = Field(description="the weights as vLLM serves them (vllm_dtype: 2 or 4 bytes each)")
    method: Method = Field(description="the memory estimator's row: full_gc = full with gradient checkpointing")
    finetuning_type: Literal["full", "lora"]
    quantization_bit: int | None = None
    deepspeed: DeepSpeedConfig | None = None
    static_gb_per_gpu: float
    max_cutoff_len: int = Field(description="longest cutoff_len at batch 1 that fits, within the context")
    model_context_len: int | None
    tensor_parallel_size: int
    tensor_parallel_fixed_from: int | None = Field(None, description="models.yaml's size, which vLLM would refuse")
    data_parallel_size: int = Field(description="vLLM replicas over the GPUs left: gpu_count // TP")
    max_model_len: int | None
    max_model_len_wanted: int | None = Field(None, description="models.yaml's length (within the context) when "
                                                              "the KV cache made it shorter")
    kv_cache_gb: float = Field(0.0, description="KV cache of one max_model_len sequence, per GPU")
    kv_memory_gb: float = Field(0.0, description="what vLLM finds for the KV cache per GPU: utilization x "
                                                 "memory - weights - the profiled forward pass")
    vllm_dtype: str
    gpu_memory_utilization: float = Field(0.9, description="vLLM's share of each GPU (models.yaml)")
    lora_rank: int | None = Field(description="the rank the memory plan assumes (LoRA methods)")
    max_lora_rank: int = Field(description="vLLM's --max-lora-rank: an adapter above it is merged first")
    disk_per_loop_gb: float = Field(description="the trained model (full: 16-bit weights; LoRA: adapter) "
                                                "plus one checkpoint of it")
    cpu_ram_gb: float | None = Field(None, description="host RAM the plan was made for (None: unknown)")
    offload: OffloadPolicy = Field(default_factory=OffloadPolicy, description="whether ZeRO-3 CPU offload could "
                                                                              "be planned")
    memory: MemoryReport
    notes: list[str] = Field(default_factory=list)
    preflight: list[Verdict] = Field(default_factory=list)

    @property
    def refused(self) -> list[Verdict]:
        return [v for v in self.preflight if v.status == "refused"]


def _choose_method(report: MemoryReport, context: int | None) -> Method:
    useful = min(USEFUL_CUTOFF, context) if context else USEFUL_CUTOFF
    for method in METHOD_ORDER:
        if report.device == "cpu" and method == "qlora":
            continue  # bitsandbytes needs CUDA
        est = report.get(method)
        if est.fits and est.max_seq_len >= useful:
            return method
    fitting = [m for m in METHOD_ORDER if report.get(m).fits and not (report.device == "cpu" and m == "qlora")]
    return fitting[0] if fitting else "qlora" if report.device == "gpu" else "lora"


def _serving(values: dict[str, Any], model_config: dict[str, Any], hardware: HardwareProfile) -> dict[str, Any]:
    """What evaluation will serve with: models.yaml resolved by the evaluator's own
    :meth:`InferenceSettings.for_gpus` (dtype, TP, ``max_model_len`` within the context and the KV cache),
    plus the KV-cache figures of that length."""
    gpu = hardware.gpu_count > 0
    merged = InferenceSettings(model="plan", values=values).for_gpus(
        hardware.gpu_count, model_config, per_gpu_memory_gb=hardware.memory_gb,
        compute_capability=hardware.compute_capability if gpu else None, gpu_name=hardware.gpu_name)
    dtype = str(merged.get("dtype", "bfloat16")) if gpu else "float32"
    merged["vllm_dtype"] = dtype
    merged["weights_gb"] = weights_gb(model_config, vllm_rules.dtype_bytes(dtype)) if gpu else weights_gb(model_config)
    length, tp = merged.get("max_seq_len"), int(merged["tensor_parallel_size"])
    if gpu and length and model_config:
        merged["kv_cache_gb"] = vllm_rules.kv_cache_bytes(model_config, int(length), tensor_parallel_size=tp,
                                                          dtype=dtype) / 1e9
        merged["kv_memory_gb"] = vllm_rules.kv_memory_bytes(
            model_config, weights_bytes=merged["weights_gb"] * 1e9, tensor_parallel_size=tp, dtype=dtype,
            per_gpu_memory_gb=hardware.memory_gb, gpu_memory_utilization=float(merged.get("gpu_memory_utilization",
                                                                                           0.9)),
            gpu_name=hardware.gpu_name) / 1e9
    return merged


def launch_plan(model_config: dict[str, Any], hardware: HardwareProfile, *, name: str = "",
                inference: dict[str, Any] | None = None, lora_rank: int | None = None,
                cpu_ram_gb: float | None = None, offload: OffloadPolicy | None = None) -> LaunchPlan:
    """The launch plan of a model (its parsed ``config.json``) on ``hardware``, with its preflight.

    Args:
        model_config: the model's ``config.json`` as a dict.
        hardware: :func:`~ftagent.tools.launch.profiles.parse_hardware_spec` or ``profile_of(detect_gpus())``.
        name: the model's name (models.yaml lookup and the report).
        inference: the model's models.yaml settings (``InferenceSettings.values``); default: looked up by name.
        lora_rank: the LoRA rank to plan for; default: models.yaml ``max_lora_rank`` (the largest vLLM
            serves without merging).
        cpu_ram_gb: host RAM (None: unknown, and offload is not considered), for ZeRO-3 CPU offload of a
            full fine-tune that does not fit otherwise, where ``offload`` allows it.
        offload: :func:`~ftagent.tools.launch.offload.offload_policy` (default: not asked, CPU Adam not built).

    Raises:
        KeyError: the config lacks what the memory estimate needs (hidden_size, num_hidden_layers, vocab_size).
    """
    values = dict(inference if inference is not None else inference_settings(name or "default").values)
    notes: list[str] = []
    spec = spec_from_config(model_config, name or "model")
    gpu = hardware.gpu_count > 0
    max_rank = int(values.get("max_lora_rank", vllm_rules.DEFAULT_MAX_LORA_RANK))
    rank = int(lora_rank or max_rank)
    offload = offload or OffloadPolicy()
    report = estimate_memory(spec, hardware.memory_gb if gpu else (cpu_ram_gb or 0.0), max(1, hardware.gpu_count),
                             lora_rank=rank, device="gpu" if gpu else "cpu", cpu_ram_gb=cpu_ram_gb,
                             offload_allowed=offload.allowed, cpu_adam=offload.cpu_adam)
    if gpu and cpu_ram_gb is None:
        notes.append("RAM unknown: offload not considered (--ram GB)")
    elif gpu and not offload.allowed:
        notes.append(offload.reason_not())
    context = vllm_rules.model_context_len(model_config)
    method = _choose_method(report, context)
    est = report.get(method)
    precision = hardware.precision
    if hardware.capability_assumed:
        notes.append(f"compute capability of {hardware.gpu_name or 'these GPUs'} not known: 8.0 assumed (bf16)")
    configured_tp = values.get("tensor_parallel_size", "auto")
    serving = _serving(values, model_config, hardware)
    tp = int(serving["tensor_parallel_size"])
    fixed_from = int(configured_tp) if configured_tp != "auto" and int(configured_tp) != tp else None
    if serving["vllm_dtype"] == "float32" and gpu:
        notes.append("vLLM dtype float32: this model type refuses float16 and these GPUs have no bf16 "
                     "(weights and KV cache at 4 bytes)")
    if serving.get("max_seq_len_wanted"):
        notes.append(f"max_model_len {serving['max_seq_len']:,} instead of {serving['max_seq_len_wanted']:,}: the KV "
                     f"cache of one longer sequence does not fit what the weights leave of each GPU")
    full = method in ("full", "full_gc")
    trained_gb = (2.0 * spec.params if full else 2.0 * lora_params(spec, rank)) / GB
    plan = LaunchPlan(
        model=name or spec.name, hardware=hardware, gpu_count=hardware.gpu_count,
        per_gpu_memory_gb=hardware.memory_gb, compute_capability=hardware.compute_capability if gpu else None,
        precision=precision, params_b=round(spec.params_b, 3), weights_gb=round(serving["weights_gb"], 2),
        method=method, finetuning_type="full" if full else "lora",
        quantization_bit=4 if method == "qlora" else None, deepspeed=est.deepspeed,
        static_gb_per_gpu=round(est.static_gb_per_gpu, 2),
        max_cutoff_len=min(est.max_seq_len, context) if context else est.max_seq_len, model_context_len=context,
        tensor_parallel_size=tp, tensor_parallel_fixed_from=fixed_from, data_parallel_size=max(1, hardware.gpu_count // tp) if gpu else 1,
        max_model_len=serving.get("max_seq_len"), max_model_len_wanted=serving.get("max_seq_len_wanted"),
        kv_cache_gb=round(serving.get("kv_cache_gb", 0.0), 3), kv_memory_gb=round(serving.get("kv_memory_gb", 0.0), 3),
        vllm_dtype=serving["vllm_dtype"], gpu_memory_utilization=float(values.get("gpu_memory_utilization", 0.9)),
        lora_rank=None if full else rank, max_lora_rank=max_rank,
        disk_per_loop_gb=round(2 * trained_gb, 3), cpu_ram_gb=cpu_ram_gb, offload=offload, memory=report,
        notes=notes)
    if any(int(vllm_rules.text_config(model_config).get(k) or 0) > 1 for k in MOE_KEYS):
        plan.notes.append("mixture of experts: the memory estimate counts one dense MLP per layer, not every "
                          "expert, so its training figures are too low")
    if est.max_seq_len < MIN_SEQ:
        plan.notes.append(f"{METHOD_CONFIGS[method]} fits fewer than {MIN_SEQ} tokens on {hardware.spec}")
    return plan.model_copy(update={"preflight": preflight(plan, model_config)})
