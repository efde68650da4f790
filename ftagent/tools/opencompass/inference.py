"""Inference settings for evaluation from ``configs/models.yaml``, resolved for a model and its GPUs.

``tensor_parallel_size: auto`` and ``max_seq_len`` (vLLM's ``max_model_len``) depend on the model's own
``config.json``: vLLM refuses a TP size that does not divide the attention heads and a length above
the model's context (:mod:`ftagent.tools.opencompass.vllm_rules`, issue 30), and stops at start-up when
one ``max_model_len`` sequence's KV cache does not fit what the weights leave of the GPU (issue 42:
``max_seq_len`` is lowered to the longest that fits, :func:`vllm_rules.longest_servable_len`). Weights
are counted at the dtype vLLM serves: 4 bytes for ``float32`` (gemma-2 on a GPU without bf16).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from ftagent.core.paths import config_file
from ftagent.core.types import EvalDecoding
from ftagent.tools.llamafactory.architecture import params_from_config
from ftagent.tools.opencompass import vllm_rules

MODELS_YAML = config_file("models.yaml")
MIN_PREFIX_LEN = 5


def load_models_yaml(path: Path | None = None) -> dict[str, dict[str, Any]]:
    """The parsed models.yaml (``{"default": {...}, "<model>": {...}}``)."""
    data = yaml.safe_load((path or MODELS_YAML).read_text(encoding="utf-8")) or {}
    return {str(k): dict(v or {}) for k, v in data.items()}


def lookup_specific(name: str, table: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Exact entry, else the longest configured prefix of ``name`` longer than 5 chars, else {}."""
    if name in table and name != "default":
        return table[name]
    prefixes = [k for k in table if k != "default" and len(k) > MIN_PREFIX_LEN and name.startswith(k)]
    return table[max(prefixes, key=len)] if prefixes else {}


def read_model_config(model_dir: str | Path | None) -> dict[str, Any]:
    """The parsed ``config.json`` of a model folder; {} when there is none (a hub id not yet downloaded)."""
    if model_dir is None:
        return {}
    path = Path(model_dir) / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def weights_gb(model_config: dict[str, Any], bytes_per_param: float = 2.0) -> float:
    """The weights in GB at ``bytes_per_param`` (2: bfloat16/float16, 4: float32); 0 when unknown."""
    cfg = vllm_rules.text_config(model_config)
    try:
        return params_from_config(cfg) * bytes_per_param / 1e9
    except (KeyError, TypeError):
        return 0.0


def tensor_parallel_size(value: Any, gpu_count: int, model_config: dict[str, Any], *,
                         per_gpu_memory_gb: float = 0.0, dtype: str = "bfloat16") -> int:
    """``auto`` → the smallest TP size vLLM accepts for this model that fits its weights at ``dtype``
    (:func:`vllm_rules.choose_tensor_parallel`; 1 without GPUs). A number passes through unless vLLM
    would refuse it for this model (it does not divide the heads): then the ``auto`` choice."""
    if value != "auto" and vllm_rules.tp_divides(model_config, max(1, int(value))):
        return max(1, int(value))
    if gpu_count <= 0:
        return 1
    return vllm_rules.choose_tensor_parallel(
        model_config, gpu_count, weights_gb=weights_gb(model_config, vllm_rules.dtype_bytes(dtype)),
        per_gpu_memory_gb=per_gpu_memory_gb)


def servable_len(merged: dict[str, Any], model_config: dict[str, Any], *, per_gpu_memory_gb: float,
                 gpu_name: str) -> int:
    """The longest ``max_model_len`` whose KV cache fits next to the weights (resolved settings ``merged``)."""
    dtype = str(merged.get("dtype", "bfloat16"))
    return vllm_rules.longest_servable_len(
        model_config, weights_bytes=weights_gb(model_config, vllm_rules.dtype_bytes(dtype)) * 1e9,
        tensor_parallel_size=int(merged["tensor_parallel_size"]), dtype=dtype, per_gpu_memory_gb=per_gpu_memory_gb,
        gpu_memory_utilization=float(merged.get("gpu_memory_utilization", 0.9)), gpu_name=gpu_name)


def max_model_len(configured: Any, model_config: dict[str, Any]) -> int | None:
    """models.yaml's ``max_seq_len`` capped at the longest length vLLM accepts for this model."""
    context = vllm_rules.model_context_len(model_config)
    if not configured:
        return context
    return min(int(configured), context) if context else int(configured)


class InferenceSettings(BaseModel):
    """One model's evaluation settings, read from models.yaml once per session (start-up resolves them).

    ``values`` is ``{**default, **specific}`` as the file has it; :meth:`for_gpus` resolves
    ``tensor_parallel_size`` and ``max_seq_len`` for a GPU count and the model's ``config.json``
    (the scenario knows the hardware and the model folder, start-up does not).
    """

    model_config = ConfigDict(frozen=True)

    model: str = Field(description="the base model name the entry was looked up for")
    values: dict[str, Any] = Field(description="{**default, **exact entry or longest prefix}")

    def for_gpus(self, gpu_count: int, model_config: dict[str, Any], *, per_gpu_memory_gb: float = 0.0,
                 compute_capability: tuple[int, int] | None = None, gpu_name: str = "") -> dict[str, Any]:
        """The settings resolved for ``gpu_count`` GPUs and the model's ``config.json`` (``model_config``,
        {} when unknown): ``tensor_parallel_size`` divides its heads, ``max_seq_len`` fits its context,
        a ``bfloat16`` dtype becomes what a GPU below compute capability 8.0 runs, and with the memory per
        GPU known, ``max_seq_len`` is lowered to the longest one sequence's KV cache fits (the wanted
        length stays under ``max_seq_len_wanted``; one below :data:`vllm_rules.MIN_SERVE_LEN` is left for
        the launch plan to refuse)."""
        merged = dict(self.values)
        if str(merged.get("dtype", "")).lower() == "bfloat16" and gpu_count > 0:
            merged["dtype"] = vllm_rules.serving_dtype(model_config, compute_capability)
        merged["tensor_parallel_size"] = tensor_parallel_size(
            merged.get("tensor_parallel_size", 1), gpu_count, model_config, per_gpu_memory_gb=per_gpu_memory_gb,
            dtype=str(merged.get("dtype", "bfloat16")))
        if merged.get("max_seq_len") or model_config:
            merged["max_seq_len"] = max_model_len(merged.get("max_seq_len"), model_config)
        if gpu_count > 0 and per_gpu_memory_gb > 0 and model_config and merged.get("max_seq_len"):
            fits = servable_len(merged, model_config, per_gpu_memory_gb=per_gpu_memory_gb, gpu_name=gpu_name)
            if fits < int(merged["max_seq_len"]) and fits >= vllm_rules.MIN_SERVE_LEN:
                merged["max_seq_len_wanted"], merged["max_seq_len"] = int(merged["max_seq_len"]), fits
        return merged


def inference_settings(model_name: str, path: Path | None = None) -> InferenceSettings:
    """Read models.yaml (``path``, default the shipped one) and take ``model_name``'s settings."""
    table = load_models_yaml(path)
    return InferenceSettings(model=model_name,
                             values={**table.get("default", {}), **lookup_specific(model_name, table)})


def inference_config(model_name: str, gpu_count: int, path: Path | None = None, *,
                     inference: InferenceSettings | None = None, model_config: dict[str, Any] | None = None,
                     per_gpu_memory_gb: float = 0.0, compute_capability: tuple[int, int] | None = None,
                     gpu_name: str = "") -> dict[str, Any]:
    """``{**default, **specific}`` for ``model_name`` resolved by :meth:`InferenceSettings.for_gpus`.

    ``inference``: the session's settings, resolved at start-up (models.yaml is then not read again).
    ``model_config``: the model's ``config.json`` (None: unknown, TP ``auto`` then gives 1 and the
    context is not capped).
    """
    return (inference or inference_settings(model_name, path)).for_gpus(
        gpu_count, model_config or {}, per_gpu_memory_gb=per_gpu_memory_gb, compute_capability=compute_capability,
        gpu_name=gpu_name)


SAMPLING_BACKENDS = ("vllm", "vllm-server")  # the HF backend always decodes greedily


def samples(temperature: float, backend: str) -> bool:
    """Whether evaluation samples: only a vLLM backend, and only at a temperature above 0."""
    return float(temperature) > 0 and backend in SAMPLING_BACKENDS


ANSWER_CAP_RULE = "2"  # in the eval cache key; 2: thinking models get the larger cap (was: the smaller)


def answer_token_limit(benchmark_max: int | None, model_max: int | None, *, thinking: bool = False,
                       max_seq_len: int | None = None) -> int | None:
    """New tokens one answer may have (the one rule for evaluation and the planner's brief).

    A benchmark's cap (``max_out_len`` of its YAML, 32 for MMLU) is sized for the answer alone. A
    model that answers directly gets the smaller of the benchmark's and the model's ``max_out_len``
    (models.yaml). A thinking model (``enable_thinking: true`` in models.yaml) writes its reasoning
    inside the same budget, so a benchmark's small cap would cut it mid-thought: it gets the larger
    of the two (Qwen3: 38,912 on MMLU, as stock OpenCompass gives it wherever a dataset sets no cap
    of its own), never more than its context window ``max_seq_len``.

    Args:
        benchmark_max: the benchmark's (or sub-dataset's) ``max_out_len``; None or 0 = none.
        model_max: the model's ``max_out_len`` from models.yaml; None or 0 = none.
        thinking: the model thinks before it answers (models.yaml ``enable_thinking``).
        max_seq_len: the model's context window (models.yaml), an upper bound for thinking models.

    Returns:
        The cap in tokens, or None when neither side sets one.
    """
    limits = [int(x) for x in (benchmark_max, model_max) if x]
    if not limits:
        return None
    if not thinking:
        return min(limits)
    cap = max(limits)
    return min(cap, int(max_seq_len)) if max_seq_len else cap


def eval_decoding(model_name: str, gpu_count: int, benchmark_max_out_len: int | None, *,
                  inference: InferenceSettings | None = None,
                  model_config: dict[str, Any] | None = None, per_gpu_memory_gb: float = 0.0,
                  compute_capability: tuple[int, int] | None = None, gpu_name: str = "") -> EvalDecoding:
    """How evaluation will generate for ``model_name`` on a benchmark (what the planner is told); with the
    GPUs' memory, the ``max_seq_len`` the KV cache allows, as the evaluator will serve it."""
    inf = inference_config(model_name, gpu_count, inference=inference, model_config=model_config,
                           per_gpu_memory_gb=per_gpu_memory_gb, compute_capability=compute_capability,
                           gpu_name=gpu_name)
    temperature = float(inf.get("temperature", 0.0))
    return EvalDecoding(sampling=samples(temperature, "vllm" if gpu_count > 0 else "hf"),  # vLLM on a GPU
                        temperature=temperature, top_p=float(inf.get("top_p", 1.0)),
                        top_k=int(inf.get("top_k", 1)),
                        max_out_len=answer_token_limit(benchmark_max_out_len, inf.get("max_out_len"),
                                                       thinking=bool(inf.get("enable_thinking", False)),
                                                       max_seq_len=inf.get("max_seq_len")),
                        max_seq_len=int(inf["max_seq_len"]) if inf.get("max_seq_len") else None,
                        enable_thinking=bool(inf.get("enable_thinking", False)))
