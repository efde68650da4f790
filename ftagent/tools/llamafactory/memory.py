"""Rule-of-thumb training-memory estimator: which fine-tuning methods fit, and how long a sequence.

Per method (``full``, ``full_gc`` = full with gradient checkpointing, ``lora``, ``qlora``) at batch 1,
with the model facts of :mod:`~ftagent.tools.llamafactory.architecture` (parameters with the config
class's ``tie_word_embeddings`` default, the loss peak):

* **static memory per GPU** (weights, gradients, optimizer state). Mixed-precision AdamW needs
  16 bytes per trained parameter (LLaMA-Factory upcasts trainable parameters to fp32 outside ZeRO-3,
  ``model/adapter.py`` ``init_adapter``: weights 4 + grads 4 + moments 8; under ZeRO-3 bf16 weights 2 +
  bf16 grads 2 + fp32 master 4 + moments 8). Full fine-tuning over several GPUs shards it with DeepSpeed
  ZeRO-3 (``16·P / N``) and each GPU also holds the parameters ZeRO-3 has gathered: up to
  ``stage3_max_live_parameters`` (1e9 in ``configs/deepspeed/ds_z3_config.json``), 2 bytes each
  (:data:`ZERO3_MAX_LIVE_PARAMS`; DeepSpeed ``runtime/zero/partitioned_param_coordinator.py`` releases a
  gathered parameter only past ``stage3_max_reuse_distance``, also 1e9). LoRA/QLoRA keep the frozen
  base on every GPU (data parallel, no sharding): 2 bytes/param (bf16), or for 4-bit NF4 0.516 bytes
  per quantized parameter (0.5 + an 8-bit absmax per 64 + an fp32 one per 256 blocks: bitsandbytes
  ``quantize_4bit`` blocksize 64 with LLaMA-Factory's default ``double_quantization: true``) while
  ``embed_tokens`` and an untied ``lm_head`` stay 16-bit (``architecture.embedding_params``); plus 16
  bytes per adapter parameter.
* **activations per token** (not sharded: every GPU holds its own sequence), bf16, flash/SDPA attention
  (no T² scores). One decoder layer saves for its backward (:func:`layer_bytes`): its input and the
  norm's output, the rotated query, key and value, the attention output, the residual and the second
  norm's output, and four MLP tensors of the intermediate width (gate, its activation, up, their
  product): ``2·(4h + 2q + 2kv + 4i)`` bytes, plus two intermediate-width gradients while the layer's
  backward runs. With gradient checkpointing (LLaMA-Factory's default; LoRA and QLoRA always) only each
  layer's bf16 input is kept (``2·h`` per layer) and one layer is recomputed at a time; without it every
  layer keeps its tensors. Plus the loss peak: ``14·V`` bytes per token (``16·V`` with gemma-2's logit
  soft-capping; ``architecture.logits_bytes_per_token``, measured). For V = 152,064 (Qwen2.5) that is
  2.1 MB per token, far more than a 7B model's 28 checkpointed layers (0.2 MB).
* **usable memory per GPU**: ``0.9 · per_gpu_gb − 1.5 GB`` (CUDA context, allocator fragmentation).

``max_seq_len = (usable − static) / per_token`` and a method "fits" when at least 512 tokens fit.
The per-GPU memory is that of ONE GPU (never a sum over GPUs; the reference multiplied a sum by N).

**Launch plan** (what the validator then injects, so the table and the run agree): each method names
the DeepSpeed config it needs (``configs/deepspeed/``) or none:

* full / full_gc on several GPUs: ZeRO-3 (``ds_z3_config.json``), the sharding assumed above;
* full / full_gc that does not fit even so: ZeRO-3 with optimizer and parameters offloaded to CPU
  RAM (``ds_z3_offload_config.json``), only where offload is allowed (the user asked, or DeepSpeed's
  CPU Adam is built in the tool env: :mod:`ftagent.tools.launch.offload`) and the host has ``18·P``
  bytes to spare (fp32 master weights, moments and gradients plus a bf16 copy); the GPU then keeps the
  gathered parameters only (at most ``stage3_max_live_parameters``, 2 bytes each);
* full / full_gc on one GPU that fits: no DeepSpeed (a plain single-process run);
* LoRA / QLoRA: no DeepSpeed (data parallel; bitsandbytes QLoRA does not combine with ZeRO-3).

``ds_z2_config.json`` is shipped for planners that choose it themselves (LoRA over several GPUs).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from ftagent.tools.llamafactory.architecture import (
    LOGITS_BYTES,
    attention_dims,
    embedding_params,
    logits_bytes_per_token,
    params_from_config,
)

Method = Literal["full", "full_gc", "lora", "qlora"]
DeepSpeedConfig = Literal["ds_z2_config.json", "ds_z3_config.json", "ds_z3_offload_config.json"]
DS_Z2: DeepSpeedConfig = "ds_z2_config.json"
DS_Z3: DeepSpeedConfig = "ds_z3_config.json"
DS_Z3_OFFLOAD: DeepSpeedConfig = "ds_z3_offload_config.json"
DEEPSPEED_CONFIGS: tuple[DeepSpeedConfig, ...] = (DS_Z2, DS_Z3, DS_Z3_OFFLOAD)
DEEPSPEED_STAGES: dict[str, str] = {DS_Z2: "ZeRO-2", DS_Z3: "ZeRO-3", DS_Z3_OFFLOAD: "ZeRO-3 + CPU offload"}
OFFLOAD_CPU_BYTES = 18.0  # per parameter on the host: fp32 master 4 + moments 8 + fp32 grads 4 + bf16 copy 2
# configs/deepspeed/ds_z3*_config.json stage3_max_live_parameters: the parameters ZeRO-3 keeps gathered
ZERO3_MAX_LIVE_PARAMS = 1_000_000_000
GATHERED_BYTES = 2.0  # bf16, per gathered parameter
CPU_USABLE_FRACTION = 0.8
METHODS: tuple[Method, ...] = ("full", "full_gc", "lora", "qlora")
GB = 1e9
MIN_SEQ = 512
USABLE_FRACTION = 0.9
RESERVED_GB = 1.5
ADAM_BYTES = 16.0
FROZEN_BYTES = {"lora": 2.0, "qlora": 0.516}  # bf16; NF4 with double quantization (module docstring)
EMBEDDING_BYTES = 2.0  # embed_tokens / untied lm_head under 4-bit LoRA: kept 16-bit
CHECKPOINT_BYTES = 2.0  # per hidden unit and layer: the bf16 input a checkpointed layer keeps
# (max params in billions, hidden, layers): rough architecture by size when config.json is absent
_SIZE_BUCKETS = ((0.2, 576, 30), (0.6, 1024, 24), (1.0, 1536, 28), (2.0, 2048, 28), (4.0, 2560, 36),
                 (9.0, 4096, 36), (15.0, 5120, 40), (35.0, 5120, 64), (80.0, 8192, 80), (1e9, 8192, 96))


class ModelSpec(BaseModel):
    """What the estimator needs to know about a model."""

    name: str
    params: int
    hidden_size: int
    num_layers: int
    vocab_size: int = 32000
    intermediate_size: int = 0
    num_heads: int = 0
    num_kv_heads: int = 0
    max_position_embeddings: int | None = None
    q_dim: int = Field(0, description="heads x head_dim (0: hidden_size)")
    kv_dim: int = Field(0, description="kv heads x head_dim (0: hidden_size)")
    embedding_params: int = Field(0, description="embed_tokens + untied lm_head (0: vocab x hidden, untied)")
    logits_bytes: float = Field(LOGITS_BYTES, description="bytes per vocab entry and token at the loss peak")
    from_config: bool = Field(False, description="False when guessed from the name")

    @property
    def params_b(self) -> float:
        return self.params / 1e9


def parse_param_count(name: str) -> int | None:
    """Parameters from a name such as ``Qwen3-1.7B``, ``Llama-3.1-8B-Instruct`` or ``SmolLM2-135M``."""
    matches = re.findall(r"(?<![\w.])(\d+(?:\.\d+)?)\s*([BbMm])(?![a-zA-Z])", name.replace("_", "-"))
    if not matches:
        return None
    value, unit = matches[-1]
    return int(float(value) * (1e9 if unit in "Bb" else 1e6))


def spec_from_config(cfg: dict, name: str) -> ModelSpec:
    """A :class:`ModelSpec` from a parsed ``config.json`` (a multimodal one: its ``text_config``).

    Raises:
        KeyError: the config lacks ``hidden_size``, ``num_hidden_layers`` or ``vocab_size``.
    """
    cfg = cfg.get("text_config", cfg) if "hidden_size" not in cfg else cfg
    q_dim, kv_dim = attention_dims(cfg)
    return ModelSpec(
        name=name, params=params_from_config(cfg), hidden_size=cfg["hidden_size"],
        num_layers=cfg["num_hidden_layers"], vocab_size=cfg["vocab_size"],
        intermediate_size=cfg.get("intermediate_size") or 4 * cfg["hidden_size"],
        num_heads=cfg.get("num_attention_heads") or 0, num_kv_heads=cfg.get("num_key_value_heads") or 0,
        max_position_embeddings=cfg.get("max_position_embeddings"), q_dim=q_dim, kv_dim=kv_dim,
        embedding_params=embedding_params(cfg), logits_bytes=logits_bytes_per_token(cfg), from_config=True,
    )


def model_spec(model: str | Path) -> ModelSpec:
    """Build a :class:`ModelSpec` from a model folder (``config.json``) or a name like ``8B``.

    Raises:
        ValueError: when neither a config nor a size in the name is available.
    """
    path = Path(model)
    cfg_file = path / "config.json"
    if cfg_file.is_file():
        return spec_from_config(json.loads(cfg_file.read_text(encoding="utf-8")), path.name)
    params = parse_param_count(str(model))
    if params is None:
        raise ValueError(f"cannot tell the size of '{model}': no config.json and no size like 7B in the name")
    _, hidden, layers = next(b for b in _SIZE_BUCKETS if params / 1e9 <= b[0])
    return ModelSpec(name=str(model), params=params, hidden_size=hidden, num_layers=layers,
                     vocab_size=152064 if params > 3e8 else 49152, intermediate_size=int(hidden * 8 / 3))


def lora_params(spec: ModelSpec, rank: int = 64) -> int:
    """Adapter parameters for LoRA on all linear layers (q, k, v, o, gate, up, down)."""
    h, inter = spec.hidden_size, spec.intermediate_size or 4 * spec.hidden_size
    kv = h * spec.num_kv_heads // spec.num_heads if spec.num_heads and spec.num_kv_heads else h
    shapes = [(h, h), (h, kv), (h, kv), (h, h), (h, inter), (h, inter), (inter, h)]
    return spec.num_layers * sum(rank * (i + o) for i, o in shapes)


class MethodEstimate(BaseModel):
    """One method's verdict."""

    method: Method
    fits: bool
    static_gb_per_gpu: float
    per_token_mb: float
    max_seq_len: int = Field(description="tokens at batch 1 on one GPU, not capped by the model context")
    sharded: bool = Field(description="weights/optimizer sharded across GPUs (ZeRO-3)")
    deepspeed: DeepSpeedConfig | None = Field(None, description="configs/deepspeed file the run needs")
    offload: bool = Field(False, description="optimizer and parameters offloaded to CPU RAM")


class MemoryReport(BaseModel):
    """The estimate for one model on one hardware setup."""

    model: str
    params_b: float
    per_gpu_gb: float
    num_gpus: int
    device: str = "gpu"
    max_position_embeddings: int | None = None
    offload_allowed: bool = Field(False, description="ZeRO-3 CPU offload could be planned (tools/launch/offload.py)")
    cpu_adam: bool = Field(False, description="DeepSpeed's CPU Adam is built: an offloaded run uses it")
    methods: list[MethodEstimate]

    def get(self, method: Method) -> MethodEstimate:
        return next(m for m in self.methods if m.method == method)

    def launch_of(self, m: MethodEstimate) -> str:
        """The launch column: ``ZeRO-3 (ds_z3_config.json)``, else ``DDP × N``, ``1 GPU`` or ``CPU``."""
        if m.deepspeed:
            return f"{DEEPSPEED_STAGES[m.deepspeed]} ({m.deepspeed})"
        if self.device == "cpu":
            return "CPU"
        return f"DDP × {self.num_gpus}" if self.num_gpus > 1 else "1 GPU"

    def to_markdown(self) -> str:
        """A "Hardware Memory Constraints" block for prompts and reports.

        Rows are named as LLaMA-Factory configs (:data:`METHOD_CONFIGS`); without a GPU the 4-bit
        row is left out (bitsandbytes needs CUDA); sizes carry a unit that keeps small ones apart.
        """
        ctx = self.max_position_embeddings
        lines = [
            "## Hardware Memory Constraints",
            f"- Hardware: {self.num_gpus} × {self.per_gpu_gb:.0f} GB ({self.device})",
            f"- Model: {self.model}, {_params_text(self.params_b)} parameters, max_position_embeddings: {ctx or 'unknown'}",
            "",
            "| LLaMA-Factory config | Fits | Launch (DeepSpeed config) | Weights + optimizer per device "
            "| Max seq_len (batch=1) |",
            "|---|---|---|---|---|",
        ]
        for m in self.methods:
            if self.device == "cpu" and m.method == "qlora":
                continue
            seq = ("not viable" if not m.fits else f"whole context ({ctx:,})" if ctx and m.max_seq_len >= ctx
                   else f"{m.max_seq_len:,}")
            lines.append(f"| {METHOD_CONFIGS[m.method]}{' (ZeRO-3)' if m.sharded else ''} | {'yes' if m.fits else 'no'} | "
                         f"{self.launch_of(m)} | {_size_text(m.static_gb_per_gpu)} | {seq} |")
        lines += ["", "- Gradient checkpointing is LLaMA-Factory's default; `disable_gradient_checkpointing: true` "
                      "trades memory for speed.",
                  "- The system sets `deepspeed:` to the config in the Launch column of the method the config "
                  "uses (and the torchrun launch for several GPUs); do not set it yourself.",
                  f"- Keep cutoff_len ≤ min(max seq_len of the chosen method, {ctx or 'model context'}).",
                  "- A longer cutoff_len needs a smaller per-device batch (activations grow with batch × length)."]
        if any(m.offload for m in self.methods):
            lines.append("- ZeRO-3 CPU offload runs the optimizer step on the CPU ("
                         + ("DeepSpeed's CPU Adam" if self.cpu_adam else "torch AdamW: DeepSpeed's CPU Adam is not "
                            "built") + "): many times slower per step than a method that fits the GPUs.")
        lines.append("- No GPU: 4-bit quantization (bitsandbytes) is not available." if self.device == "cpu" else
                     "- Quality usually: full > lora > 4-bit lora; memory needs the other way round.")
        return "\n".join(lines)


METHOD_CONFIGS: dict[str, str] = {"full": "full + disable_gradient_checkpointing", "full_gc": "full",
                                  "lora": "lora", "qlora": "lora + quantization_bit: 4"}


def _size_text(gb: float) -> str:
    """``131.1 GB``, ``8.9 MB``, ``412 KB``: a unit that does not round small sizes to one value."""
    for unit, size in (("GB", 1.0), ("MB", 1e-3), ("KB", 1e-6)):
        if gb >= size:
            return f"{gb / size:.1f} {unit}"
    return f"{gb * 1e9:.0f} B"


def _gathered_bytes(spec: ModelSpec) -> float:
    """What ZeRO-3 keeps gathered on each GPU: up to ``stage3_max_live_parameters`` bf16 parameters."""
    return GATHERED_BYTES * min(spec.params, ZERO3_MAX_LIVE_PARAMS)


def _embeddings(spec: ModelSpec) -> int:
    return spec.embedding_params or 2 * spec.vocab_size * spec.hidden_size


def _static_bytes(spec: ModelSpec, method: Method, num_gpus: int, rank: int) -> float:
    if method in ("full", "full_gc"):
        sharded = ADAM_BYTES * spec.params / max(num_gpus, 1)
        return sharded + (_gathered_bytes(spec) if num_gpus > 1 else 0.0)
    adapter = ADAM_BYTES * lora_params(spec, rank)
    if method == "qlora":  # linear layers in 4 bits, the embeddings in 16 (module docstring)
        embed = min(_embeddings(spec), spec.params)
        return FROZEN_BYTES["qlora"] * (spec.params - embed) + EMBEDDING_BYTES * embed + adapter
    return FROZEN_BYTES[method] * spec.params + adapter


def layer_bytes(spec: ModelSpec) -> tuple[float, float]:
    """(saved, backward transient) bytes per token of one decoder layer, bf16 (module docstring)."""
    h, inter = spec.hidden_size, spec.intermediate_size or 4 * spec.hidden_size
    q, kv = spec.q_dim or h, spec.kv_dim or h
    return 2.0 * (4 * h + 2 * q + 2 * kv + 4 * inter), 2.0 * 2 * inter


def _per_token_bytes(spec: ModelSpec, method: Method) -> float:
    saved, transient = layer_bytes(spec)
    if method == "full":  # no checkpointing: every layer keeps its tensors
        activations = saved * spec.num_layers + transient
    else:  # each layer's input, plus one layer recomputed at a time
        activations = CHECKPOINT_BYTES * spec.hidden_size * spec.num_layers + saved + transient
    return activations + spec.logits_bytes * spec.vocab_size


def _max_seq(usable: float, static: float, per_token: float) -> int:
    return max(int((usable - static) // per_token), 0) if usable > static else 0


def _params_text(params_b: float) -> str:
    """``7.62B``, ``494M``, ``0.56M``: billions only where they do not round to zero."""
    if params_b >= 1:
        return f"{params_b:.2f}B"
    return f"{params_b * 1e3:.0f}M" if params_b >= 0.01 else f"{params_b * 1e3:.2f}M"


def _estimate(spec: ModelSpec, method: Method, per_gpu_gb: float, num_gpus: int, rank: int,
              cpu_ram_gb: float | None = None) -> MethodEstimate:
    static = _static_bytes(spec, method, num_gpus, rank)
    per_token = _per_token_bytes(spec, method)
    usable = USABLE_FRACTION * per_gpu_gb * GB - RESERVED_GB * GB
    max_seq = _max_seq(usable, static, per_token)
    full = method in ("full", "full_gc")
    deepspeed: DeepSpeedConfig | None = DS_Z3 if full and num_gpus > 1 else None
    offload = False
    if full and max_seq < MIN_SEQ and cpu_ram_gb and (
            OFFLOAD_CPU_BYTES * spec.params <= CPU_USABLE_FRACTION * cpu_ram_gb * GB):
        off_static = _gathered_bytes(spec)  # the partitions live in host RAM
        off_seq = _max_seq(usable, off_static, per_token)
        if off_seq >= MIN_SEQ:
            static, max_seq, deepspeed, offload = off_static, off_seq, DS_Z3_OFFLOAD, True
    return MethodEstimate(method=method, fits=max_seq >= MIN_SEQ, static_gb_per_gpu=round(static / GB, 6),
                          per_token_mb=round(per_token / 1e6, 4), max_seq_len=max_seq,
                          sharded=full and num_gpus > 1, deepspeed=deepspeed, offload=offload)


def estimate_memory(spec: ModelSpec, per_gpu_gb: float, num_gpus: int = 1, *, lora_rank: int = 64,
                    device: str = "gpu", cpu_ram_gb: float | None = None, offload_allowed: bool = False,
                    cpu_adam: bool = False) -> MemoryReport:
    """Estimate every method for ``spec`` on ``num_gpus`` GPUs of ``per_gpu_gb`` GB each.

    Args:
        cpu_ram_gb: host RAM (None: unknown).
        offload_allowed: with ``cpu_ram_gb``, a full fine-tune that does not fit the GPUs is planned with
            ZeRO-3 CPU offload if the host can hold the offloaded state (:mod:`ftagent.tools.launch.offload`
            decides whether it may be). Ignored on CPU.
        cpu_adam: DeepSpeed's CPU Adam is built (recorded: the offload config's optimizer flag follows it).
    """
    ram = cpu_ram_gb if device == "gpu" and offload_allowed else None
    return MemoryReport(model=spec.name, params_b=round(spec.params_b, 6), per_gpu_gb=per_gpu_gb,
                        num_gpus=num_gpus, device=device, max_position_embeddings=spec.max_position_embeddings,
                        offload_allowed=offload_allowed and device == "gpu", cpu_adam=cpu_adam,
                        methods=[_estimate(spec, m, per_gpu_gb, num_gpus, lora_rank, ram) for m in METHODS])


def estimate_for_hardware(model: str | Path, hardware, *, cpu_ram_gb: float, offload_allowed: bool = False,
                          cpu_adam: bool = False) -> MemoryReport:
    """Estimate for detected GPUs (NVML's bytes), or for ``cpu_ram_gb`` of host RAM without GPUs; the
    model's size from its name when no ``config.json`` can be read (the launch plan covers the rest)."""
    spec = model_spec(model)
    if hardware.gpu_count:
        per_gpu = min(g.total_bytes for g in hardware.gpus) / GB
        return estimate_memory(spec, per_gpu, hardware.gpu_count, cpu_ram_gb=cpu_ram_gb,
                               offload_allowed=offload_allowed, cpu_adam=cpu_adam)
    return estimate_memory(spec, cpu_ram_gb, 1, device="cpu")


def method_of_config(config: dict) -> Method:
    """The estimator's method for a LLaMA-Factory config (what the run will actually do).

    ``full`` only with ``disable_gradient_checkpointing: true`` (LLaMA-Factory checkpoints by
    default); ``qlora`` for LoRA with ``quantization_bit``; every other type (freeze, oft...) is
    estimated as LoRA (frozen base, few trained parameters).
    """
    kind = str(config.get("finetuning_type") or "lora").lower()
    if kind == "full":
        return "full" if _truthy(config.get("disable_gradient_checkpointing")) else "full_gc"
    return "qlora" if config.get("quantization_bit") not in (None, "", 0, "none", "None") else "lora"


def _truthy(value: object) -> bool:
    return value is True or str(value).strip().lower() in ("true", "1", "yes")


def planned_deepspeed(memory: MemoryReport | dict | None, config: dict) -> DeepSpeedConfig | None:
    """The DeepSpeed config the memory plan names for the method of ``config`` (None: none needed)."""
    if not memory:
        return None
    report = memory if isinstance(memory, MemoryReport) else MemoryReport.model_validate(memory)
    if report.device != "gpu":
        return None
    try:
        return report.get(method_of_config(config)).deepspeed
    except StopIteration:
        return None
