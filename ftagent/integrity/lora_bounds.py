"""How far each tensor of a LoRA adapter can be from where peft started it (the rule: :mod:`ftagent.integrity.lora`,
the run's bound: :mod:`ftagent.integrity.movement`)."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from ftagent.integrity import safetensors_io
from ftagent.integrity.movement import ElementBound, RunBudget
from ftagent.integrity.safetensors_io import TensorEntry, decode, raw_chunks
from ftagent.integrity.tensor_compare import LOAD_ROUNDOFF, ROUNDOFF, TINY

#: the chance that a ``normal_(0, 1)`` start (``lora_embedding_B``) exceeds the limit used for it
NORMAL_TAIL = 1e-12
Matrix = npt.NDArray[np.float64]


def start_reach(kind: str, entry: TensorEntry) -> float:
    """How far from zero peft 0.18 starts a factor (``LoraLayer.reset_lora_parameters``, default init)."""
    if kind == "lora_A":  # kaiming_uniform_(a=sqrt(5)): U(-b, b), b = sqrt(1/3) * sqrt(3 / fan_in) = 1/sqrt(in)
        return 1.0 / math.sqrt(max(1, entry.shape[-1]))
    if kind == "lora_embedding_B":  # normal_(0, 1): P(any |x| > z) <= 2 n exp(-z^2 / 2) = NORMAL_TAIL
        return math.sqrt(2.0 * math.log(2.0 * max(1, entry.elements) / NORMAL_TAIL))
    return 0.0  # lora_B, lora_embedding_A: zeros_


def factor_over(kind: str, entry: TensorEntry, values: Matrix, budget: RunBudget) -> float:
    """The largest ``|value|`` of a factor over what it may reach: its start's reach plus the run's bound (the
    weight decay only shrinks a value) plus the stored dtype's rounding."""
    if not values.size:
        return 0.0
    limit = start_reach(kind, entry) + budget.bound(kind).absolute + TINY
    size = np.abs(values)
    return float(np.max(size / (limit + ROUNDOFF.get(entry.dtype, 0.0) * size)))


def row_norms(weight: TensorEntry, transposed: bool) -> Matrix:
    """The L2 norm of each row of ``transpose(W, fan_in_fan_out)`` (peft's ``get_weight_norm``: ``dim=1``),
    reading ``W`` by whole rows."""
    rows, cols = weight.shape
    per = max(1, safetensors_io.CHUNK_ELEMENTS // max(cols, 1))
    sums = np.zeros(cols if transposed else rows)
    row = 0
    for block in raw_chunks(weight, per * cols):
        w = decode(block, weight.dtype).astype(np.float64).reshape(-1, cols)
        if transposed:
            sums += np.sum(w * w, axis=0)
        else:
            sums[row:row + len(w)] = np.sum(w * w, axis=1)
        row += len(w)
    return np.asarray(np.sqrt(sums), dtype=np.float64)


def magnitude_over(magnitude: Matrix, dtype: str, start: Matrix, bound: ElementBound) -> float:
    """DoRA's magnitudes against the start weights' row norms (where peft starts them)."""
    if magnitude.shape != start.shape:
        return math.inf
    size = np.abs(magnitude)
    limit = bound.absolute + TINY + (bound.relative + LOAD_ROUNDOFF) * start + ROUNDOFF.get(dtype, 0.0) * size
    return float(np.max(np.abs(magnitude - start) / limit)) if size.size else 0.0


def delta_reach(left: Matrix, right: Matrix, scale: float) -> float:
    """``max |s (L @ R)_ij| <= s sum_k max_i |L_ik| max_j |R_kj|``: how far a merged module can be from its start."""
    return scale * float(np.sum(np.max(np.abs(left), axis=0) * np.max(np.abs(right), axis=1)))
