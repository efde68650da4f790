"""The ``weights`` check of a LoRA adapter: the model the evaluation loads (the base plus the adapter) descends
from the base, tensor by tensor.

An adapted module's effective weight is ``W + s * dW`` with ``dW = B @ A`` (``lora_A.weight`` ``[r, in]``,
``lora_B.weight`` ``[out, r]``; an embedding's ``lora_embedding_A``/``_B`` and a ``fan_in_fan_out`` layer store
it transposed) and ``s = lora_alpha / r`` (``/ sqrt(r)`` with ``use_rslora``; ``alpha_pattern`` per module):
peft 0.18 ``tuners/lora/layer.py`` ``LoraLayer.update_layer`` and ``get_delta_weight``. Its cosine to ``W`` is

    cos = (|W|^2 + s<W, dW>) / (|W| * sqrt(|W|^2 + 2 s<W, dW> + s^2 |dW|^2))

``|dW|`` needs only the adapter (``|B A|^2 = sum((B^T B) * (A A^T))``, r x r) and ``|W|`` was fingerprinted
at the start, so with ``rho = s|dW| / |W|`` the cosine is at least ``(1 - rho) / (1 + rho)`` without reading
``W``; only a module whose bound falls below the limit (``rho`` > 0.82 for 0.1) reads ``W`` for the exact
``<W, dW>``, streamed by rows. An adapter that swaps the model (``dW = W_other - W``) has rho ~ 1.4 and is
measured exactly. Full copies (``modules_to_save``) are compared as full tensors; a tensor of any other kind
is a problem. DoRA's magnitude vectors rescale rows of ``W + s dW`` and are not compared (they cannot turn
the base into another model's directions).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ftagent.engine.events import CheckVerdict
from ftagent.integrity import safetensors_io
from ftagent.integrity.safetensors_io import TensorEntry, decode, loader_view, raw_chunks
from ftagent.integrity.tensor_compare import Comparison, compare_tensors
from ftagent.integrity.weight_prints import WeightPrints

PREFIX = "base_model.model."
_PAIR = re.compile(r"^(?P<module>.+)\.(?P<kind>lora_A|lora_B|lora_embedding_A|lora_embedding_B)(?:\.weight)?$")
_MAGNITUDE = "lora_magnitude_vector"
Matrix = npt.NDArray[np.float64]


def _values(entry: TensorEntry) -> Matrix:
    """A whole (small) adapter tensor as float64 of its shape."""
    flat = np.concatenate([decode(b, entry.dtype) for b in raw_chunks(entry)]) if entry.nbytes else np.zeros(0)
    return flat.astype(np.float64).reshape(entry.shape)


def _scale(config: dict[str, Any], module: str, rank: int) -> float:
    alpha = float(config.get("lora_alpha") or rank)
    for key, value in (config.get("alpha_pattern") or {}).items():
        if re.fullmatch(rf"(.*\.)?{key}", module):
            alpha = float(value)
    return alpha / (math.sqrt(rank) if config.get("use_rslora") else rank)


def _factors(parts: dict[str, TensorEntry], transposed: bool) -> tuple[Matrix, Matrix]:
    """(L, R) with dW = L @ R in the base weight's own layout."""
    a = _values(parts.get("lora_A") or parts["lora_embedding_A"])
    b = _values(parts.get("lora_B") or parts["lora_embedding_B"])
    return (a.T, b.T) if transposed else (b, a)


def _inner(base: TensorEntry, left: Matrix, right: Matrix) -> float:
    """<W, L @ R>, reading W by whole rows (at most CHUNK_ELEMENTS values at a time)."""
    cols = base.shape[1]
    rows_per = max(1, safetensors_io.CHUNK_ELEMENTS // max(cols, 1))
    total, row = 0.0, 0
    for block in raw_chunks(base, rows_per * cols):
        w = decode(block, base.dtype).astype(np.float64).reshape(-1, cols)
        total += float(np.sum(w * (left[row:row + len(w)] @ right)))
        row += len(w)
    return total


def _module_cosine(base: TensorEntry, base_sq: float, left: Matrix, right: Matrix, scale: float,
                   min_cosine: float) -> tuple[float, bool]:
    """(the effective weight's cosine to the base, or its lower bound; whether it is exact)."""
    delta_sq = scale * scale * float(np.sum((left.T @ left) * (right @ right.T)))
    w_norm = math.sqrt(base_sq)
    rho = math.sqrt(max(delta_sq, 0.0)) / w_norm
    bound = (1 - rho) / (1 + rho)
    if bound >= min_cosine:
        return bound, False
    inner = scale * _inner(base, left, right)
    return (base_sq + inner) / (w_norm * math.sqrt(max(base_sq + 2 * inner + delta_sq, 1e-300))), True


def _base_name(key: str) -> str:
    return key[len(PREFIX):] if key.startswith(PREFIX) else key


def adapter_check(prints: WeightPrints, adapter: Path, *, min_cosine: float) -> CheckVerdict:
    """The effective weights of base + adapter against the base (see the module doc)."""
    try:
        config = json.loads((adapter / "adapter_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = {}
    view = loader_view(adapter, adapter=True)
    if not view.tensors and not view.problems:
        return CheckVerdict(name="weights", passed=False, detail="LoRA adapter: no adapter_model.safetensors")
    base_view = loader_view(Path(prints.folder))
    out = Comparison(min_cosine)
    out.problems += view.problems
    modules: dict[str, dict[str, TensorEntry]] = {}
    copies: dict[str, tuple[TensorEntry, TensorEntry]] = {}  # modules_to_save: full tensors
    bounded = 0
    for key, entry in view.tensors.items():
        pair = _PAIR.match(key)
        if pair:
            modules.setdefault(_base_name(pair["module"]), {})[pair["kind"]] = entry
        elif _MAGNITUDE in key:
            continue
        elif _base_name(key) in prints.tensors and _base_name(key) in base_view.tensors:
            copies[_base_name(key)] = (entry, base_view.tensors[_base_name(key)])
        else:
            out.problems.append(f"adapter tensor {key} is neither a LoRA factor nor a copy of a base tensor")
    compare_tensors(out, copies)
    for module, parts in sorted(modules.items()):
        name = f"{module}.weight"
        base = base_view.tensors.get(name)
        if base is None or name not in prints.tensors or len(base.shape) != 2 or len(parts) != 2:
            out.problems.append(f"LoRA factors of {module} do not fit a 2-D base tensor {name}")
            continue
        transposed = "lora_embedding_A" in parts or bool(config.get("fan_in_fan_out"))
        left, right = _factors(parts, transposed)
        if (left.shape[0], right.shape[1]) != tuple(base.shape) or left.shape[1] != right.shape[0]:
            out.problems.append(f"LoRA factors of {module} ({list(left.shape)} @ {list(right.shape)}) do not fit "
                                f"{name} {list(base.shape)}")
            continue
        if prints.tensors[name].sq_norm == 0:
            out.not_comparable.append(name)
            continue
        cos, exact = _module_cosine(base, prints.tensors[name].sq_norm, left, right,
                                    _scale(config, module, left.shape[1]), min_cosine)
        bounded += not exact
        out.add(name, cos)
    verdict = out.verdict("LoRA adapter (base + adapter)")
    if bounded and verdict.passed:
        verdict.detail += f"; {bounded} module(s) by the bound (1 - rho) / (1 + rho)"
    return verdict
