"""Inference settings for evaluation from ``configs/models.yaml`` and the tensor-parallel rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ftagent.core.paths import config_file

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


def tensor_parallel_size(value: Any, gpu_count: int) -> int:
    """``auto`` → largest power of two ≤ ``gpu_count`` (1 when there is no GPU); ints pass through."""
    if value != "auto":
        return max(1, int(value))
    if gpu_count <= 0:
        return 1
    size = 1
    while size * 2 <= gpu_count:
        size *= 2
    return size


def inference_config(model_name: str, gpu_count: int, path: Path | None = None) -> dict[str, Any]:
    """``{**default, **specific}`` for ``model_name`` with ``tensor_parallel_size`` resolved."""
    table = load_models_yaml(path)
    merged = {**table.get("default", {}), **lookup_specific(model_name, table)}
    merged["tensor_parallel_size"] = tensor_parallel_size(merged.get("tensor_parallel_size", 1), gpu_count)
    return merged
