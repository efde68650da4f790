"""The ``weights`` check: every value of the candidate is within what its run's optimizer can move it from the
start weights, and every tensor descends from the base's.

Two rules, each on every tensor:

* **movement** (the stronger, :mod:`ftagent.integrity.movement`): no value is farther from its start value (the
  base's, or for a chained stage the parent loop's weights, :mod:`ftagent.integrity.trained_run`) than the
  validated run's optimizer can move it in the steps the trainer recorded; a model without the trainer's
  record cannot be bounded and is flagged;
* **cosine** (the older floor): each tensor's cosine similarity to the base's is at least
  :data:`MIN_WEIGHT_COSINE`.

What "compared" means for each kind of candidate (docs/benchmarks.md, "Integrity guard"):

* **a full model** (full or freeze fine-tune, or a model merged from an adapter): every tensor the loaders
  read (:func:`ftagent.integrity.safetensors_io.loader_view`) is streamed next to the base's tensor of that
  name (and the start's, when not the base's). The candidate holds exactly the base's tensors, with the base's
  shapes (``lm_head.weight`` may be missing when ``tie_word_embeddings`` ties it to the embeddings; an
  embedding grown to the validated run's vocabulary size is compared by the base's rows). A base tensor that is all zeros (a bias initialised
  to 0) has no direction to descend from: it is counted as not comparable;
* **a LoRA adapter**: the model the evaluation loads is the base plus each adapted module's
  ``scale x B @ A``; each such effective weight must pass the same cosine rule, each factor is held to where
  peft starts it plus the run's bound, and the adapter's full copies (``modules_to_save``) are compared as full
  tensors (:mod:`ftagent.integrity.lora`); a model the evaluation merged from it may differ from the start only
  by what the adapter adds (:func:`merged_check`).

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
from collections.abc import Callable
from pathlib import Path

from ftagent.engine.events import CheckVerdict
from ftagent.integrity.lora import adapter_check, merged_allowance
from ftagent.integrity.movement import ElementBound
from ftagent.integrity.safetensors_io import WeightFiles, WeightsError, loader_view
from ftagent.integrity.tensor_compare import (
    MIN_WEIGHT_COSINE,
    Comparison,
    Movement,
    Pair,
    compare_tensors,
    grown,
)
from ftagent.integrity.trained_run import TrainedRun
from ftagent.integrity.weight_prints import WeightPrints, base_unchanged

TIED_HEAD = "lm_head.weight"
ADAPTER_MARKERS = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")
#: how far each tensor of a full model may have moved (None: no movement bound for that tensor)
Allowance = Callable[[str], ElementBound | None]


def _tied(candidate: Path) -> bool:
    try:
        return bool(json.loads((candidate / "config.json").read_text(encoding="utf-8")).get("tie_word_embeddings"))
    except (OSError, ValueError, AttributeError):
        return False


def _pairs(view: WeightFiles, base_view: WeightFiles, prints: WeightPrints, run: TrainedRun,
           allowance: Allowance | None, out: Comparison) -> dict[str, Pair]:
    """Each candidate tensor with the base's and the movement it is held to (the base's rows of a grown one)."""
    start_view = loader_view(run.start) if run.start is not None else None
    if start_view is not None:
        out.problems += [f"start weights {run.start}: {p}" for p in start_view.problems]
    pairs: dict[str, Pair] = {}
    for name, entry in view.tensors.items():
        base = base_view.tensors.get(name)
        if name not in prints.tensors or base is None:
            continue
        cand = grown(entry, base, run.vocab_sizes) or entry
        bound = allowance(name) if allowance is not None else None
        move = None
        if bound is not None:
            start = start_view.tensors.get(name) if start_view is not None else None
            if start_view is not None and start is None:
                out.problems.append(f"{name} is not in the start weights {run.start}")
                continue
            move = Movement(bound=bound, start=(grown(start, base, run.vocab_sizes) or start) if start else None)
        pairs[name] = (cand, base, move)
    return pairs


def compare_full(prints: WeightPrints, candidate: Path, *, run: TrainedRun, min_cosine: float = MIN_WEIGHT_COSINE,
                 allowance: Allowance | None = None) -> Comparison:
    """Every tensor of a full model against the base's: what :func:`full_model_check` judges. ``allowance``:
    how far each tensor may have moved (default: the run's bound for every tensor)."""
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
    if run.parent_flag:
        out.problems.append(f"the run started from weights flagged `weights`: {run.parent_flag}"[:300])
    if allowance is None:
        if run.budget is None:
            out.problems.append(f"how far training moved the weights cannot be bounded: {run.problem}")
        else:
            full = run.budget.bound("full")
            allowance, out.bound_words = (lambda _name: full), run.budget.words()
    compare_tensors(out, _pairs(view, base_view, prints, run, allowance, out))
    return out


def full_model_check(prints: WeightPrints, candidate: Path, *, run: TrainedRun, min_cosine: float = MIN_WEIGHT_COSINE,
                     what: str = "full model", allowance: Allowance | None = None) -> CheckVerdict:
    """Every tensor of a full model (or merged one) against the base's (see the module doc)."""
    return compare_full(prints, candidate, run=run, min_cosine=min_cosine, allowance=allowance).verdict(what)


def merged_check(prints: WeightPrints, merged: Path, adapter: Path, *, run: TrainedRun) -> CheckVerdict:
    """The model the evaluation merged from ``adapter`` and served: every tensor against the base's, each moved
    from the start weights by at most what the adapter adds (:func:`ftagent.integrity.lora.merged_allowance`)."""
    what = "the merged model the evaluation served"
    if run.budget is None:
        return full_model_check(prints, merged, run=run, what=what)
    try:
        allowance, words = merged_allowance(Path(adapter), run.budget)
    except (OSError, WeightsError) as exc:
        return CheckVerdict(name="weights", passed=False, detail=f"{what}: its adapter cannot be read: {exc}")
    out = compare_full(prints, merged, run=run, allowance=allowance)
    out.bound_words = words
    return out.verdict(what)


def is_adapter(folder: Path) -> bool:
    return any((Path(folder) / f).exists() for f in ADAPTER_MARKERS)


def weight_check(prints: WeightPrints | None, candidate: Path, *, run: TrainedRun,
                 min_cosine: float = MIN_WEIGHT_COSINE) -> CheckVerdict:
    """The ``weights`` verdict on one candidate folder: a full model or a LoRA adapter of the base, trained by
    ``run``."""
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
            return adapter_check(prints, Path(candidate), run=run, min_cosine=min_cosine)
        return full_model_check(prints, Path(candidate), run=run, min_cosine=min_cosine)
    except (OSError, WeightsError) as exc:
        return CheckVerdict(name="weights", passed=False, detail=f"the candidate's weights cannot be read: {exc}")
