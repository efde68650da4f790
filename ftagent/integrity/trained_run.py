"""What the guard knows of the run that produced a candidate: its movement bound (from the validated config and
the trainer's own record, :mod:`ftagent.integrity.movement`), the weights it started from, and the vocabulary
size the validated run grew the embeddings to.

* **the config** is the one validation approved, frozen outside the workspace
  (:attr:`ftagent.core.approved.Approved.config_path`), else the experiment's record of what was trained;
* **the steps** are ``trainer_state.json`` in the candidate's folder (the trainer writes it with the weights;
  the folder's top-level files are hashed after training, :attr:`~ftagent.core.approved.Approved.model`);
* **the start** is the weights the system resolved for the loop (its ``StartModel``, recorded by the workflow as
  ``artefacts["start_weights"]`` for a loop that trains from an earlier loop's: issue 40,
  ``WORKSPACE_PATH/<session>/weights/loop_<n>``), else the base; a snapshot from before that record falls back
  to the frozen config's ``model_name_or_path``, which the system set from the same ``StartModel``. A chained
  run is bounded against its start, and its start must itself have passed ``weights`` (its loop's verdict);
* **a grown vocabulary**: LLaMA-Factory's ``resize_embedding_layer`` (``model/model_utils/embedding.py``, for
  ``resize_vocab``, ``add_tokens`` or ``add_special_tokens``) appends rows to the input and output embeddings
  (new tokens; the base's rows stay where they were). The validated micro-batch ran the same config, so its
  ``config.json``'s ``vocab_size`` is the size an honest run grows to; only those sizes are accepted, and only
  the base's rows are compared.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ftagent.integrity.movement import RunBudget, read_state, run_budget
from ftagent.integrity.safetensors_io import WeightsError, open_regular


@dataclass(frozen=True)
class TrainedRun:
    """The run that produced a candidate, as far as the ``weights`` check needs it (module doc)."""

    budget: RunBudget | None  # None: the run's movement cannot be bounded (``problem`` says why)
    problem: str = ""
    start: Path | None = None  # the start weights' folder when they are not the base's
    parent_flag: str = ""  # the start's own ``weights`` flag (a chained run starts from flagged weights)
    vocab_sizes: frozenset[int] = field(default_factory=frozenset)  # sizes the validated run grew to


def _vocab_size(folder: Path) -> int | None:
    try:
        with open_regular(Path(folder) / "config.json") as fh:
            value = json.loads(fh.read(1 << 20)).get("vocab_size")
    except (WeightsError, OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and value > 0 else None


def _same_folder(a: str | Path, b: str | Path) -> bool:
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except OSError:
        return False


def trained_run(config: dict[str, Any], candidate: Path, *, base: Path, start: Path | None, validated: list[Path],
                parent_flag: str = "") -> TrainedRun:
    """The :class:`TrainedRun` of ``candidate`` trained with the validated ``config`` from ``start`` (None: the
    base; module doc); ``parent_flag``: the ``weights`` flag of the loop whose weights the run started from
    ("" when clean)."""
    sizes = frozenset(s for s in (_vocab_size(v) for v in validated) if s is not None)
    declared = str(start or config.get("model_name_or_path") or "")
    start = None if not declared or _same_folder(declared, base) else Path(declared)
    try:
        budget = run_budget(config, read_state(Path(candidate)))
    except WeightsError as exc:
        return TrainedRun(budget=None, problem=str(exc), start=start, parent_flag=parent_flag, vocab_sizes=sizes)
    return TrainedRun(budget=budget, start=start, parent_flag=parent_flag, vocab_sizes=sizes)
