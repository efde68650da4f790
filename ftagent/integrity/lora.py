"""The ``weights`` check of a LoRA adapter: the model the evaluation loads (the base plus the adapter) descends
from the base, tensor by tensor, and the adapter holds only what its run could have trained.

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
is a problem.

**Movement** (:mod:`ftagent.integrity.movement`): every factor is bounded by where peft starts it plus what the
run's optimizer can add (``reset_lora_parameters``): ``lora_B`` and ``lora_embedding_A`` start at zero, so
``|value| <=`` the run's bound; ``lora_A`` starts ``kaiming_uniform_(a=sqrt(5))``, within ``1/sqrt(in)``;
``lora_embedding_B`` starts ``normal_(0, 1)``, within ``sqrt(2 ln(2n / 1e-12))`` for its ``n`` values (exceeded
with probability below 1e-12). LoRA+ trains ``lora_B`` (and every 1-D parameter) at ``loraplus_lr_ratio`` times
the learning rate. DoRA's magnitude vectors start at the row norms of the start weights (peft
``tuners/lora/dora.py`` ``get_weight_norm``) and move by at most the bound. The full copies move from the start
weights by at most the bound. So ``|s dW|`` of each module is at most ``s sum_k max|B_k| max|A_k|``, which bounds
how far a model merged from the adapter may be from its start (:func:`merged_allowance`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ftagent.engine.events import CheckVerdict
from ftagent.integrity import safetensors_io
from ftagent.integrity.lora_bounds import delta_reach, factor_over, magnitude_over, row_norms
from ftagent.integrity.movement import ElementBound, RunBudget
from ftagent.integrity.safetensors_io import TensorEntry, WeightFiles, decode, loader_view, raw_chunks
from ftagent.integrity.tensor_compare import Comparison, Movement, Pair, compare_tensors, grown
from ftagent.integrity.trained_run import TrainedRun
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


@dataclass
class Adapter:
    """An adapter's tensors by role: LoRA factors per module, DoRA magnitudes, full copies, the rest."""

    config: dict[str, Any]
    view: WeightFiles
    modules: dict[str, dict[str, TensorEntry]] = field(default_factory=dict)
    magnitudes: dict[str, TensorEntry] = field(default_factory=dict)
    copies: dict[str, TensorEntry] = field(default_factory=dict)  # modules_to_save, by the base tensor's name
    strays: list[str] = field(default_factory=list)

    @property
    def transposed(self) -> bool:
        return bool(self.config.get("fan_in_fan_out"))

    def factors(self, module: str) -> tuple[Matrix, Matrix, float]:
        """(L, R, s) with the module's update ``s * L @ R`` in the base weight's layout."""
        parts = self.modules[module]
        left, right = _factors(parts, "lora_embedding_A" in parts or self.transposed)
        return left, right, _scale(self.config, module, left.shape[1])


def read_adapter(adapter: Path, base_names: set[str]) -> Adapter:
    """``adapter``'s config and tensors by role (``base_names``: the base's tensors, for the full copies)."""
    try:
        config = json.loads((adapter / "adapter_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = {}
    out = Adapter(config=config if isinstance(config, dict) else {}, view=loader_view(adapter, adapter=True))
    for key, entry in out.view.tensors.items():
        pair = _PAIR.match(key)
        if pair:
            out.modules.setdefault(_base_name(pair["module"]), {})[pair["kind"]] = entry
        elif f".{_MAGNITUDE}" in key:
            out.magnitudes[_base_name(key.split(f".{_MAGNITUDE}")[0])] = entry
        elif _base_name(key) in base_names:
            out.copies[_base_name(key)] = entry
        else:
            out.strays.append(key)
    return out


def _copy_pairs(parsed: Adapter, base_view: WeightFiles, start_view: WeightFiles | None, run: TrainedRun,
                out: Comparison) -> dict[str, Pair]:
    """The full copies against the base's tensors, each held to the run's bound from its start value."""
    pairs: dict[str, Pair] = {}
    for name, entry in parsed.copies.items():
        base = base_view.tensors.get(name)
        if base is None:
            continue
        move = None
        if run.budget is not None:
            start = start_view.tensors.get(name) if start_view is not None else None
            if start_view is not None and start is None:
                out.problems.append(f"{name} is not in the start weights {run.start}")
                continue
            kind = "copy_1d" if len(entry.shape) == 1 else "copy"
            move = Movement(bound=run.budget.bound(kind),
                            start=(grown(start, base, run.vocab_sizes) or start) if start else None)
        pairs[name] = (grown(entry, base, run.vocab_sizes) or entry, base, move)
    return pairs


def _factor_movements(parsed: Adapter, module: str, budget: RunBudget, out: Comparison) -> None:
    for kind, entry in parsed.modules[module].items():
        out.moved[f"{module}.{kind}"] = factor_over(kind, entry, _values(entry), budget)


def _magnitudes(parsed: Adapter, weights: WeightFiles, budget: RunBudget, out: Comparison) -> None:
    """DoRA's magnitude vectors against the row norms of the weights the run started from."""
    for module, entry in sorted(parsed.magnitudes.items()):
        weight = weights.tensors.get(f"{module}.weight")
        if weight is None or len(weight.shape) != 2:
            out.problems.append(f"DoRA magnitude of {module} fits no 2-D start tensor")
            continue
        start = row_norms(weight, parsed.transposed)
        values = _values(entry).reshape(-1)
        out.moved[f"{module}.{_MAGNITUDE}"] = magnitude_over(values, entry.dtype, start, budget.bound("magnitude"))


def adapter_check(prints: WeightPrints, adapter: Path, *, run: TrainedRun, min_cosine: float) -> CheckVerdict:
    """The effective weights of base + adapter against the base, and every adapter tensor against what its run
    could train (see the module doc)."""
    parsed = read_adapter(adapter, set(prints.tensors))
    view = parsed.view
    if not view.tensors and not view.problems:
        return CheckVerdict(name="weights", passed=False, detail="LoRA adapter: no adapter_model.safetensors")
    base_view = loader_view(Path(prints.folder))
    start_view = loader_view(run.start) if run.start is not None else None
    out = Comparison(min_cosine)
    out.problems += view.problems + [f"adapter tensor {k} is neither a LoRA factor nor a copy of a base tensor"
                                     for k in parsed.strays]
    if run.parent_flag:
        out.problems.append(f"the run started from weights flagged `weights`: {run.parent_flag}"[:300])
    if run.budget is None:
        out.problems.append(f"how far training moved the adapter cannot be bounded: {run.problem}")
    else:
        out.bound_words = run.budget.words()
        _magnitudes(parsed, start_view or base_view, run.budget, out)
    compare_tensors(out, _copy_pairs(parsed, base_view, start_view, run, out))
    bounded = 0
    for module, parts in sorted(parsed.modules.items()):
        name = f"{module}.weight"
        base = base_view.tensors.get(name)
        if base is None or name not in prints.tensors or len(base.shape) != 2 or len(parts) != 2:
            out.problems.append(f"LoRA factors of {module} do not fit a 2-D base tensor {name}")
            continue
        left, right, scale = parsed.factors(module)
        if (left.shape[0], right.shape[1]) != tuple(base.shape) or left.shape[1] != right.shape[0]:
            out.problems.append(f"LoRA factors of {module} ({list(left.shape)} @ {list(right.shape)}) do not fit "
                                f"{name} {list(base.shape)}")
            continue
        if run.budget is not None:
            _factor_movements(parsed, module, run.budget, out)
        if prints.tensors[name].sq_norm == 0:
            out.not_comparable.append(name)
            continue
        cos, exact = _module_cosine(base, prints.tensors[name].sq_norm, left, right, scale, min_cosine)
        bounded += not exact
        out.add(name, cos)
    verdict = out.verdict("LoRA adapter (base + adapter)")
    if bounded and verdict.passed:
        verdict.detail += f"; {bounded} module(s) by the bound (1 - rho) / (1 + rho)"
    return verdict


def merged_allowance(adapter: Path, budget: RunBudget) -> tuple[Callable[[str], ElementBound | None], str]:
    """How far each tensor of a model merged from ``adapter`` may be from the start weights: an adapted module
    by :func:`~ftagent.integrity.lora_bounds.delta_reach` of its (checked) factors, a full copy by the run's
    bound, any other tensor not at all (rounding only); a DoRA module is not bounded (its rows are rescaled)."""
    parsed = read_adapter(adapter, set())
    reach: dict[str, ElementBound | None] = {}
    for module, parts in parsed.modules.items():
        if len(parts) == 2 and module not in parsed.magnitudes:
            left, right, scale = parsed.factors(module)
            reach[f"{module}.weight"] = ElementBound(absolute=delta_reach(left, right, scale))
        else:
            reach[f"{module}.weight"] = None
    for key in parsed.strays:  # read without the base's names: the full copies are here
        entry = parsed.view.tensors[key]
        reach[_base_name(key)] = budget.bound("copy_1d" if len(entry.shape) == 1 else "copy")
    still = ElementBound(absolute=0.0)
    words = "the adapter's own factors: |s B @ A| <= s * sum_k max|B_k| * max|A_k| per module"
    return (lambda name: reach.get(name, still)), words
