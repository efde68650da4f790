"""vLLM's start-up refusals, read from upstream and applied to a model's ``config.json`` (issue 30).

The one owner of "would vLLM start with these settings": the launch plan and its preflight, the
evaluation settings (``tensor_parallel_size: auto``, ``max_model_len``) and the vLLM stand-in of the
tests all ask this module. STDLIB ONLY on purpose: the stand-in server runs in another Python env and
loads this file by path with importlib, so nothing here may import pydantic or ftagent.

Upstream (vllm-project/vllm, the version pinned in ``configs/envs/vllm.txt``):

- ``vllm/config/model.py`` ``ModelConfig.verify_with_parallel_config``: "Total number of attention
  heads (N) must be divisible by tensor parallel size (T)".
- ``vllm/model_executor/layers/linear.py`` ``QKVParallelLinear.__init__``: KV heads are split with
  ``divide(total_num_kv_heads, tp_size)`` when ``tp_size < total_num_kv_heads`` and replicated with
  ``divide(tp_size, total_num_kv_heads)`` otherwise; ``divide`` asserts exact division.
- ``vllm/config/model.py`` ``_get_and_verify_max_len``: the smallest of the length keys, multiplied by
  the rope scaling factor (except ``su``/``longrope``/``llama3`` and gemma3; yarn starts from
  ``original_max_position_embeddings``), ``model_max_length`` overriding; a larger user
  ``max_model_len`` raises unless ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``.
- ``vllm/v1/worker/gpu_worker.py`` ``_check_if_gpu_supports_dtype``: "Bfloat16 is only supported on
  GPUs with compute capability of at least 8.0".
- ``vllm/config/model.py`` ``_check_valid_dtype`` / ``_FLOAT16_NOT_SUPPORTED_MODELS``: gemma2, gemma3,
  plamo2, glm4 refuse float16 ("Numerical instability").
- ``vllm/config/lora.py`` ``MaxLoRARanks = Literal[1, 8, 16, 32, 64, 128, 256, 320, 512]``.
- ``vllm/lora/peft_helper.py`` ``PEFTHelper.validate_legal`` / ``_validate_features``: "LoRA rank R is
  greater than max_lora_rank M", "vLLM does not yet support DoRA".
- ``vllm/v1/core/kv_cache_utils.py`` ``check_enough_kv_cache_memory``: "To serve at least one request
  with the models's max seq len (L), (X GiB KV cache is needed, which is larger than the available KV
  cache memory (Y GiB)" — vLLM stops at start-up when ONE sequence of ``max_model_len`` tokens does not
  fit the KV-cache memory ``gpu_memory_utilization x total - profiled peak`` (``vllm/v1/worker/
  gpu_worker.py`` ``Worker.determine_available_memory``). :func:`longest_servable_len` mirrors it.
- ``max_model_len`` and the tokenizer: ``ModelConfig.get_and_verify_max_len`` passes the tokenizer's
  ``tokenizer_config.json`` to ``_get_and_verify_max_len`` only for pooling models with absolute position
  embeddings ("Consider max_model_len in tokenizer_config only when pooling models use absolute
  position_embedding"); a generation model's ``max_model_len`` is never capped by the tokenizer's
  ``model_max_length``, so :func:`model_context_len` does not read it either.
"""

from __future__ import annotations

import os

# vllm/config/model.py _get_and_verify_max_len: possible_keys, in upstream's order
LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
               "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")
DEFAULT_MAX_LEN = 2048  # same function: no length key at all -> 2048 (with a warning)
UNSCALED_ROPE_TYPES = ("su", "longrope", "llama3")  # same function: the factor is not applied
# vllm/config/lora.py: MaxLoRARanks (a pydantic Literal: any other --max-lora-rank is refused)
MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
DEFAULT_MAX_LORA_RANK = 16  # vllm/config/lora.py LoRAConfig.max_lora_rank default
# vllm/config/model.py _FLOAT16_NOT_SUPPORTED_MODELS
FLOAT16_REFUSED_MODEL_TYPES = ("gemma2", "gemma3", "gemma3_text", "plamo2", "glm4")
DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")  # vllm/config/model.py ModelDType
BF16_MIN_CAPABILITY = (8, 0)  # vllm/v1/worker/gpu_worker.py _check_if_gpu_supports_dtype
ALLOW_LONG_ENV = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"
# The share of a GPU the weights may take: vLLM's gpu_memory_utilization default is 0.9
# (vllm/config/cache.py), and the KV cache, activations and CUDA graphs need the rest of it.
WEIGHTS_FRACTION = 0.6
# bytes per element of a --dtype (vllm/utils/torch_utils.py STR_DTYPE_TO_TORCH_DTYPE + get_dtype_size);
# the KV cache has the model's dtype (CacheConfig.cache_dtype "auto")
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}
KV_BLOCK_SIZE = 16  # vllm/config/cache.py CacheConfig.block_size on CUDA
# vllm/engine/arg_utils.py EngineArgs.get_batch_defaults, the LLM class (the larger of its two contexts):
# GPUs of >= 70 GiB other than A100 profile 16,384 tokens and 1,024 sequences, the others 8,192 and 256
LARGE_GPU_GIB = 70
BATCH_DEFAULTS = {"large": (16384, 1024), "other": (8192, 256)}
# Not upstream: what vLLM's profile counts besides the weights, the forward pass and the sampler (NCCL and
# cuBLAS workspaces, CUDA graphs), an allowance in GB per GPU
SERVING_OVERHEAD_GB = 1.0
MIN_SERVE_LEN = 2048  # a shorter max_model_len leaves no room for a benchmark prompt and its answer


def long_len_allowed() -> bool:
    """vllm/envs.py: VLLM_ALLOW_LONG_MAX_MODEL_LEN is on for "1" or "true" (any case)."""
    return os.environ.get(ALLOW_LONG_ENV, "0").strip().lower() in ("1", "true")


def text_config(model_config: dict) -> dict:
    """The text model's config: ``text_config`` of a multimodal config, else the config itself.

    vllm/transformers_utils/config.py ``get_hf_text_config`` does the same.
    """
    inner = model_config.get("text_config")
    return inner if isinstance(inner, dict) and inner.get("num_attention_heads") else model_config


def attention_heads(model_config: dict) -> int | None:
    """``num_attention_heads`` of the (text) model, None when the config does not say."""
    value = text_config(model_config).get("num_attention_heads")
    return int(value) if value else None


def kv_heads(model_config: dict) -> int | None:
    """Total KV heads as vllm/config/model.py ``get_total_num_kv_heads`` reads them (common cases)."""
    cfg = text_config(model_config)
    if cfg.get("multi_query") and not cfg.get("new_decoder_architecture"):
        return 1
    for key in ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num"):
        if cfg.get(key) is not None:
            return int(cfg[key])
    return attention_heads(model_config)


def _rope_entries(cfg: dict) -> list[dict]:
    """The rope scaling dicts: transformers v5 ``rope_parameters`` (maybe per layer type) or v4
    ``rope_scaling``; a ``type`` key reads as ``rope_type`` (transformers' patch_rope_parameters)."""
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling")
    if not isinstance(rope, dict) or not rope:
        return []
    entries = list(rope.values()) if all(isinstance(v, dict) for v in rope.values()) else [rope]
    return [{**e, "rope_type": e.get("rope_type") or e.get("type") or "default"} for e in entries]


def model_context_len(model_config: dict) -> int | None:
    """The longest ``max_model_len`` vLLM accepts for this config without VLLM_ALLOW_LONG_MAX_MODEL_LEN.

    Mirrors vllm/config/model.py ``_get_and_verify_max_len`` (``derived_max_model_len``) for a
    generation model with sliding window enabled and no tokenizer limit. None for an empty config.
    """
    if not model_config:
        return None
    cfg = text_config(model_config)
    lengths = [float(cfg[k]) for k in LENGTH_KEYS if isinstance(cfg.get(k), (int, float)) and cfg[k]]
    derived = min(lengths) if lengths else float(DEFAULT_MAX_LEN)
    if cfg.get("model_max_length"):  # "For Command-R / Cohere ...": overrides the minimum
        derived = float(cfg["model_max_length"])
    entries = _rope_entries(cfg)
    if entries and "gemma3" not in str(cfg.get("model_type", "")):
        factor = 1.0
        for rp in entries:
            if rp["rope_type"] not in UNSCALED_ROPE_TYPES:
                factor = float(rp.get("factor", factor) or factor)
                if rp["rope_type"] == "yarn" and rp.get("original_max_position_embeddings"):
                    derived = float(rp["original_max_position_embeddings"])
        derived *= factor
    return int(derived)


def tp_divides(model_config: dict, tensor_parallel_size: int) -> bool:
    """Whether vLLM splits this model's attention and KV heads over ``tensor_parallel_size`` GPUs."""
    heads, kv = attention_heads(model_config), kv_heads(model_config)
    tp = int(tensor_parallel_size)
    if tp < 1:
        return False
    if heads and heads % tp:
        return False
    if kv:  # linear.py QKVParallelLinear: divide(kv, tp) below kv, divide(tp, kv) from kv on
        return (kv % tp == 0) if tp < kv else (tp % kv == 0)
    return True


def choose_tensor_parallel(model_config: dict, gpu_count: int, *, weights_gb: float,
                           per_gpu_memory_gb: float) -> int:
    """The smallest TP size that vLLM accepts for this model and that fits the weights in memory.

    TP 1 when the weights fit one GPU: serving on more GPUs is then data parallelism (one replica per
    GPU), which is faster than splitting every layer; ``per_gpu_memory_gb`` 0 (unknown) also gives 1.
    Never a size that does not divide the heads;
    when no valid size fits the weights, the largest valid size up to ``gpu_count`` (the memory
    shortfall is the plan's to report).
    """
    # a valid size divides the attention heads, so none is above their number (the loop is bounded by
    # the model, not by a GPU count; issue 43)
    limit = min(max(1, int(gpu_count)), attention_heads(model_config) or max(1, int(gpu_count)))
    valid = [tp for tp in range(1, limit + 1) if tp_divides(model_config, tp)]
    if not valid or per_gpu_memory_gb <= 0:  # memory unknown: the smallest size vLLM accepts
        return 1
    budget = max(0.0, float(per_gpu_memory_gb)) * WEIGHTS_FRACTION
    for tp in valid:
        if float(weights_gb) / tp <= budget:
            return tp
    return valid[-1]


def serving_dtype(model_config: dict, compute_capability: tuple[int, int] | None) -> str:
    """The ``--dtype`` vLLM accepts for this model on this GPU: bfloat16 from compute capability 8.0 (or
    unknown), else float16, else float32 for the model types that refuse float16 (gemma2 ...)."""
    if compute_capability is None or tuple(compute_capability) >= BF16_MIN_CAPABILITY:
        return "bfloat16"
    model_type = str(text_config(model_config).get("model_type") or model_config.get("model_type") or "")
    return "float32" if model_type in FLOAT16_REFUSED_MODEL_TYPES else "float16"


def _dtype_refusals(model_config: dict, dtype: str, compute_capability: tuple[int, int] | None) -> list[str]:
    name = str(dtype).lower()
    if name not in DTYPES:
        return [f"dtype={dtype!r} is not one of {DTYPES} (vllm/config/model.py _get_and_verify_dtype: "
                "'Unknown dtype')"]
    out = []
    if name == "bfloat16" and compute_capability is not None and tuple(compute_capability) < BF16_MIN_CAPABILITY:
        cc = ".".join(str(x) for x in compute_capability)
        out.append(f"dtype=bfloat16 needs compute capability >= 8.0, this GPU has {cc} "
                   "(vllm/v1/worker/gpu_worker.py _check_if_gpu_supports_dtype); use float16")
    model_type = str(text_config(model_config).get("model_type") or model_config.get("model_type") or "")
    if name in ("half", "float16") and model_type in FLOAT16_REFUSED_MODEL_TYPES:
        out.append(f"dtype={name}: model type {model_type!r} does not support float16 (vllm/config/model.py "
                   "_check_valid_dtype, _FLOAT16_NOT_SUPPORTED_MODELS); use bfloat16 or float32")
    return out


def _lora_refusals(lora_rank: int | None, max_lora_rank: int | None, use_dora: bool) -> list[str]:
    out = []
    if max_lora_rank is not None and int(max_lora_rank) not in MAX_LORA_RANKS:
        out.append(f"max_lora_rank={max_lora_rank} is not one of {MAX_LORA_RANKS} "
                   "(vllm/config/lora.py MaxLoRARanks)")
    limit = DEFAULT_MAX_LORA_RANK if max_lora_rank is None else int(max_lora_rank)
    if lora_rank is not None and int(lora_rank) > limit:
        out.append(f"LoRA rank {lora_rank} is greater than max_lora_rank {limit} "
                   "(vllm/lora/peft_helper.py PEFTHelper.validate_legal)")
    if lora_rank is not None and int(lora_rank) <= 0:
        out.append(f"LoRA rank {lora_rank} must be a positive integer (vllm/lora/peft_helper.py)")
    if use_dora:
        out.append("use_dora: vLLM does not yet support DoRA adapters (vllm/lora/peft_helper.py "
                   "PEFTHelper._validate_features); merge the adapter into the base model before serving")
    return out


def refusals(model_config: dict, *, tensor_parallel_size: int, max_model_len: int | None, dtype: str,
             compute_capability: tuple[int, int] | None = None, lora_rank: int | None = None,
             max_lora_rank: int | None = None, use_dora: bool = False) -> list[str]:
    """Every reason vLLM would refuse to start (or to load the adapter); ``[]`` when it accepts.

    ``compute_capability`` None: no GPU known, the bf16 rule is skipped. ``lora_rank`` None: no
    adapter is served. ``max_lora_rank`` None: vLLM's default (16) when an adapter is served.
    """
    out = []
    tp = int(tensor_parallel_size)
    heads, kv = attention_heads(model_config), kv_heads(model_config)
    if tp < 1:
        out.append(f"tensor_parallel_size={tp} must be >= 1 (vllm/config/parallel.py ParallelConfig)")
    elif heads and heads % tp:
        out.append(f"tensor_parallel_size={tp} does not divide num_attention_heads={heads} "
                   "(vllm/config/model.py ModelConfig.verify_with_parallel_config)")
    elif not tp_divides(model_config, tp):
        out.append(f"tensor_parallel_size={tp} and num_key_value_heads={kv}: neither divides the other "
                   "(vllm/model_executor/layers/linear.py QKVParallelLinear.__init__, divide())")
    context = model_context_len(model_config)
    if (max_model_len is not None and context is not None and int(max_model_len) > context
            and not long_len_allowed()):
        out.append(f"max_model_len={max_model_len} is greater than the model's context {context} "
                   "(vllm/config/model.py _get_and_verify_max_len; VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 overrides)")
    out += _dtype_refusals(model_config, dtype, compute_capability)
    out += _lora_refusals(lora_rank, max_lora_rank, use_dora)
    return out


# --- serving memory (vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory) -------------------


def dtype_bytes(dtype: str) -> int:
    """Bytes per weight and KV element of a vLLM ``--dtype`` (``auto`` is counted as 16-bit)."""
    return DTYPE_BYTES.get(str(dtype).lower(), 2)


def batch_defaults(per_gpu_memory_gb: float, gpu_name: str) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) vLLM profiles with on this GPU (EngineArgs.get_batch_defaults)."""
    large = per_gpu_memory_gb * 1e9 >= LARGE_GPU_GIB * 2**30 and "a100" not in gpu_name.lower()
    return BATCH_DEFAULTS["large" if large else "other"]


def kv_bytes_per_token(model_config: dict, *, tensor_parallel_size: int, dtype: str) -> int:
    """KV-cache bytes one token takes on each GPU, summed over the layers.

    vllm/v1/kv_cache_interface.py ``AttentionSpec.real_page_size_bytes``: 2 (K and V) x block x KV heads
    x head size x dtype bytes per page; KV heads per GPU ``max(1, kv_heads // tp)``
    (vllm/config/model.py ``get_num_kv_heads``). Sliding-window layers count as full attention:
    ``SlidingWindowSpec.max_memory_usage_bytes`` keeps ``min(window - 1 + max_num_batched_tokens,
    max_model_len)`` tokens, which is every token whenever the window plus the batch reaches the length
    (gemma-2: 4,096 + 8,192 > 8,192), an upper bound otherwise.
    """
    cfg = text_config(model_config)
    heads = attention_heads(model_config) or 1
    kv = max(1, int(kv_heads(model_config) or heads) // max(1, int(tensor_parallel_size)))
    head = int(cfg.get("head_dim") or int(cfg.get("hidden_size") or 0) // heads)
    return 2 * kv * head * dtype_bytes(dtype) * int(cfg.get("num_hidden_layers") or 0)


def kv_cache_bytes(model_config: dict, max_model_len: int, *, tensor_parallel_size: int, dtype: str) -> int:
    """What one ``max_model_len`` sequence needs (``FullAttentionSpec.max_memory_usage_bytes``: whole blocks)."""
    blocks = -(-int(max_model_len) // KV_BLOCK_SIZE)
    return blocks * KV_BLOCK_SIZE * kv_bytes_per_token(model_config, tensor_parallel_size=tensor_parallel_size,
                                                       dtype=dtype)


def profile_peak_bytes(model_config: dict, *, weights_bytes: float, tensor_parallel_size: int, dtype: str,
                       per_gpu_memory_gb: float, gpu_name: str = "") -> float:
    """The peak vLLM's start-up profile records on each GPU (``Worker.determine_available_memory``).

    The weights' share, one decoder layer's forward over ``max_num_batched_tokens`` tokens (input,
    residual, and the MLP's gate-up output and activation, ``2h + 3·intermediate/tp`` elements per
    token), the dummy sampler's fp32 logits over ``max_num_seqs`` rows (three copies: logits, the
    softmax, a sort), and :data:`SERVING_OVERHEAD_GB`.
    """
    cfg = text_config(model_config)
    tp = max(1, int(tensor_parallel_size))
    tokens, seqs = batch_defaults(per_gpu_memory_gb, gpu_name)
    h = int(cfg.get("hidden_size") or 0)
    inter = int(cfg.get("intermediate_size") or 4 * h)
    forward = tokens * (2 * h + 3 * inter / tp) * dtype_bytes(dtype)
    sampler = seqs * int(cfg.get("vocab_size") or 0) * 4 * 3
    return weights_bytes / tp + forward + sampler + SERVING_OVERHEAD_GB * 1e9


def kv_memory_bytes(model_config: dict, *, weights_bytes: float, tensor_parallel_size: int, dtype: str,
                    per_gpu_memory_gb: float, gpu_memory_utilization: float, gpu_name: str = "") -> float:
    """The KV-cache memory vLLM finds on each GPU: ``utilization x total - profiled peak``."""
    peak = profile_peak_bytes(model_config, weights_bytes=weights_bytes, tensor_parallel_size=tensor_parallel_size,
                              dtype=dtype, per_gpu_memory_gb=per_gpu_memory_gb, gpu_name=gpu_name)
    return float(gpu_memory_utilization) * float(per_gpu_memory_gb) * 1e9 - peak


def longest_servable_len(model_config: dict, *, weights_bytes: float, tensor_parallel_size: int, dtype: str,
                         per_gpu_memory_gb: float, gpu_memory_utilization: float, gpu_name: str = "") -> int:
    """The longest ``max_model_len`` whose one sequence fits the KV-cache memory, in whole blocks (0: none).

    vLLM's own suggestion when it refuses ("the estimated maximum model length is N",
    ``estimate_max_model_len``) is this number for its measured memory.
    """
    memory = kv_memory_bytes(model_config, weights_bytes=weights_bytes, tensor_parallel_size=tensor_parallel_size,
                             dtype=dtype, per_gpu_memory_gb=per_gpu_memory_gb,
                             gpu_memory_utilization=gpu_memory_utilization, gpu_name=gpu_name)
    per_token = kv_bytes_per_token(model_config, tensor_parallel_size=tensor_parallel_size, dtype=dtype)
    if memory <= 0 or per_token <= 0:
        return 0
    return int(memory // (per_token * KV_BLOCK_SIZE)) * KV_BLOCK_SIZE
