"""The guard's references: what every candidate is compared with, recorded once before any planner code runs
and kept outside the workspace (in the session's folder, which no confined command mounts).

* the base model's weights, fingerprinted (:func:`ftagent.integrity.weights.fingerprint`: each weight file's
  SHA-256 and stat, each tensor's dtype, shape and squared norm);
* the base model's other files as read then (:class:`ftagent.integrity.model_files.ModelFiles`: tokenizer
  hash, special tokens, chat template, configs with the decoding keys);
* the baseline evaluation's config digest of each split (:mod:`ftagent.integrity.eval_config`), recorded
  when the baseline ran.

:func:`load_or_record` writes them when the session's workflow is built (after the baseline, before loop 0)
and reads them back when a session resumes, so a resumed session compares with what its start recorded,
never with files planner code could have reached since.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from ftagent.integrity.model_files import ModelFiles, read_model_files
from ftagent.integrity.weight_prints import WeightPrints, fingerprint

FILE_NAME = "integrity_references.json"


class References(BaseModel):
    """What the guard compares candidates with (see the module doc)."""

    base: str  # the base model's folder
    weights: WeightPrints
    files: ModelFiles
    baseline_configs: dict[str, str] = Field(default_factory=dict)  # split -> eval config digest
    recorded_at: float = Field(default_factory=time.time)
    seconds: float = 0.0  # what recording them took


def record(base: Path, baseline_configs: dict[str, str]) -> References:
    """Fingerprint the base model now (streamed; every tensor is read once)."""
    started = time.monotonic()
    refs = References(base=str(base), weights=fingerprint(Path(base)), files=read_model_files(Path(base)),
                      baseline_configs=dict(baseline_configs))
    refs.seconds = time.monotonic() - started
    return refs


def load_or_record(path: Path, base: Path, baseline_configs: dict[str, str]) -> References:
    """The references of ``path`` when it holds this base's, else recorded now and written there atomically."""
    path = Path(path)
    try:
        refs = References.model_validate_json(path.read_text(encoding="utf-8"))
        if refs.base == str(base):
            return refs
    except (OSError, ValueError, ValidationError):
        pass
    refs = record(base, baseline_configs)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(refs.model_dump_json(), encoding="utf-8")
    tmp.replace(path)
    return refs
