"""Evaluation cache: ``FT_FILE_PATH/eval_cache/<key>.json`` holding an EvalResult.

Key = sha256 of (model artefact digest, benchmark, split and its ranges, inference settings, config
template version, the split rule's version :data:`~ftagent.benchmarks.splits.SPLIT_VERSION`, the scoring
rules' :data:`~ftagent.benchmarks.components.SCORING_VERSION`). The artefact digest hashes the
weight/adapter files (size + content) and the configs, so a retrained model in the same folder never
hits a stale entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

from ftagent.benchmarks.components import SCORING_VERSION
from ftagent.benchmarks.splits import SPLIT_VERSION
from ftagent.core.stats import ITEMS_SUFFIX, load_items
from ftagent.core.types import EvalResult

ARTEFACT_SUFFIXES = {".safetensors", ".bin", ".json", ".jinja", ".model", ".txt", ".py"}
_CHUNK = 1 << 20


def artefact_digest(*folders: Path | str | None) -> str:
    """sha256 over the model files (weights, adapters, configs, tokenizer) of ``folders``."""
    h = hashlib.sha256()
    for folder in folders:
        if not folder:
            continue
        folder = Path(folder)
        h.update(str(folder.name).encode())
        for path in sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in ARTEFACT_SUFFIXES):
            h.update(path.name.encode())
            with path.open("rb") as fh:
                while chunk := fh.read(_CHUNK):
                    h.update(chunk)
    return h.hexdigest()


def cache_key(digest: str, benchmark: str, split: str, ranges: Any, inference: dict[str, Any],
              template_version: str, judge: dict[str, Any] | None = None) -> str:
    """The cache key (hex sha256) of one evaluation; ``judge`` = the LLM judge's settings (model, base
    URL, retries; never the key), None when no judge is used. A different judge scores differently."""
    payload = json.dumps({"model": digest, "benchmark": benchmark, "split": split, "ranges": ranges,
                          "inference": inference, "template": template_version, "judge": judge,
                          "split_rule": SPLIT_VERSION, "scoring": SCORING_VERSION},
                         sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


class EvalCache:
    """JSON files under ``root`` (``FT_FILE_PATH/eval_cache``)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def get(self, key: str) -> EvalResult | None:
        """The cached result marked ``cached=True`` (None on a miss or an unreadable entry)."""
        path = self.path(key)
        if not path.exists():
            return None
        try:
            result = EvalResult.model_validate_json(path.read_text(encoding="utf-8"))
        except ValueError:
            return None
        return result.model_copy(update={"cached": True})

    def put(self, key: str, result: EvalResult) -> None:
        """Store ``result`` atomically, with a copy of its per-item scores (``<key>.items.json``): a hit
        must not depend on the run folder it came from (a loop's workspace can be removed)."""
        self.root.mkdir(parents=True, exist_ok=True)
        items = load_items(result.items_file)
        update: dict[str, Any] = {"cached": False}
        if items is not None:
            update["items_file"] = str(items.save(self.root / f"{key}{ITEMS_SUFFIX}"))
        tmp = self.path(key).with_name(f".{key}.{os.getpid()}.{threading.get_ident()}.tmp")  # shared folder
        tmp.write_text(result.model_copy(update=update).model_dump_json(indent=2), encoding="utf-8")
        tmp.replace(self.path(key))
