"""The ``weights`` check: every tensor of the candidate descends from the base's.

What "compared" means for each kind of candidate (docs/benchmarks.md, "Integrity guard"):

* **a full model** (full or freeze fine-tune, or a model merged from an adapter): every tensor the loaders
  read (:func:`ftagent.integrity.safetensors_io.loader_view`) is streamed next to the base's tensor of that
  name, and its cosine similarity to it, over all of its values, must be at least :data:`MIN_WEIGHT_COSINE`.
  The candidate holds exactly the base's tensors, with the base's shapes (``lm_head.weight`` may be missing
  when ``tie_word_embeddings`` ties it to the embeddings). A base tensor that is all zeros (a bias initialised
  to 0) has no direction to descend from: it is counted as not comparable;
* **a LoRA adapter**: the model the evaluation loads is the base plus each adapted module's
  ``scale x B @ A``; each such effective weight must pass the same cosine rule, and the adapter's full copies
  (``modules_to_save``) are compared as full tensors (:mod:`ftagent.integrity.lora`).

The base's tensors are fingerprinted once, before any planner code runs (:func:`fingerprint`: each weight
file's SHA-256 and stat, each tensor's dtype, shape and squared norm), and every check first proves the
base's files are still those bytes (:func:`base_unchanged`). Memory stays bounded: values are read
:data:`~ftagent.integrity.safetensors_io.CHUNK_ELEMENTS` at a time, never a whole tensor.

Calibration of :data:`MIN_WEIGHT_COSINE` (``builtin/tiny-qwen2``, the CPU demo's aggressive full fine-tune,
learning rate 1e-3 for 150 to 1,200 steps): the embeddings keep cosine 0.36-0.45 (relative L2 distance up
to 2.5: a distance alone cannot tell it from another checkpoint), the layers' projections 0.72-0.94, the
norms 1.00; an independently initialised checkpoint of the same architecture is at cosine ~0
(|cos| ~ 1/sqrt(values), < 0.02 for the >= 4,096 values of any 2-D tensor). Fine-tunes of large models stay
above 0.99. A checkpoint derived from the same base (its instruct version) is close by design and passes.
"""

from __future__ import annotations

import json
from pathlib import Path

from ftagent.engine.events import CheckVerdict
from ftagent.integrity.lora import adapter_check
from ftagent.integrity.safetensors_io import WeightsError, loader_view
from ftagent.integrity.tensor_compare import MIN_WEIGHT_COSINE, Comparison, compare_tensors
from ftagent.integrity.weight_prints import WeightPrints, base_unchanged

TIED_HEAD = "lm_head.weight"
ADAPTER_MARKERS = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")


def _tied(candidate: Path) -> bool:
    try:
        return bool(json.loads((candidate / "config.json").read_text(encoding="utf-8")).get("tie_word_embeddings"))
    except (OSError, ValueError, AttributeError):
        return False


def compare_full(prints: WeightPrints, candidate: Path, *, min_cosine: float = MIN_WEIGHT_COSINE) -> Comparison:
    """Every tensor of a full model against the base's: what :func:`full_model_check` judges."""
    view = loader_view(Path(candidate))
    base_view = loader_view(Path(prints.folder))
    out = Comparison(min_cosine)
    out.problems += view.problems
    if not view.tensors and not view.problems:
        out.problems.append("no safetensors weights in the candidate")
        return out
    missing = [n for n in prints.tensors if n not in view.tensors and not (n == TIED_HEAD and _tied(Path(candidate)))]
    extra = [n for n in view.tensors if n not in prints.tensors]
    if missing:
        out.problems.append(f"{len(missing)} base tensor(s) missing ({', '.join(missing[:3])})")
    if extra:
        out.problems.append(f"{len(extra)} tensor(s) the base does not have ({', '.join(extra[:3])})")
    compare_tensors(out, {name: (entry, base_view.tensors[name]) for name, entry in view.tensors.items()
                          if name in prints.tensors and name in base_view.tensors})
    return out


def full_model_check(prints: WeightPrints, candidate: Path, *, min_cosine: float = MIN_WEIGHT_COSINE,
                     what: str = "full model") -> CheckVerdict:
    """Every tensor of a full model (or merged one) against the base's (see the module doc)."""
    return compare_full(prints, candidate, min_cosine=min_cosine).verdict(what)


def is_adapter(folder: Path) -> bool:
    return any((Path(folder) / f).exists() for f in ADAPTER_MARKERS)


def weight_check(prints: WeightPrints | None, candidate: Path, *, min_cosine: float = MIN_WEIGHT_COSINE) -> CheckVerdict:
    """The ``weights`` verdict on one candidate folder: a full model or a LoRA adapter of the base."""
    if prints is None:
        return CheckVerdict(name="weights", passed=None, detail="the base's weights were not fingerprinted at the start")
    if prints.problem:
        return CheckVerdict(name="weights", passed=None, detail=f"the base has no comparable weights: {prints.problem}")
    changed = base_unchanged(prints)
    if changed:
        return CheckVerdict(name="weights", passed=False,
                            detail=f"the base model's weight files changed since the session started: {changed}")
    try:
        if is_adapter(Path(candidate)):
            return adapter_check(prints, Path(candidate), min_cosine=min_cosine)
        return full_model_check(prints, Path(candidate), min_cosine=min_cosine)
    except (OSError, WeightsError) as exc:
        return CheckVerdict(name="weights", passed=False, detail=f"the candidate's weights cannot be read: {exc}")
