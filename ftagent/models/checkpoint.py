"""A model folder's weight files are whole: read with the ``safetensors`` package, no tensor loaded (issue 43).

``safetensors.safe_open`` reads the header (names, dtypes, shapes, byte ranges) and refuses a file whose
header does not cover it exactly (*"incomplete metadata, file not fully covered"*: a cut download or copy)
or whose header is no JSON. :func:`checkpoint_problems` applies it to every ``*.safetensors`` file a model
or adapter folder holds and to every shard its index names; ``.bin`` files (pickles) cannot be read without
torch here: they are checked in the tool env only (:mod:`ftagent.tools.opencompass.weights`).

Used before anything runs: ``--base-model`` folders at start-up (:func:`ftagent.models.builtin.check_model_folder`,
exit 2), ``ftagent eval --model`` (exit 2) and every evaluation (:func:`ftagent.tools.opencompass.weights.check_weights`).
"""

from __future__ import annotations

import json
from pathlib import Path

INDEX_SUFFIXES = (".safetensors.index.json", ".bin.index.json")


def safetensors_problem(path: Path) -> str | None:
    """Why ``path`` is not a whole safetensors file (None: its header covers the file exactly)."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="numpy") as fh:
            fh.keys()
    except (SafetensorError, OSError, ValueError) as exc:
        size = path.stat().st_size if path.exists() else 0
        return f"{path.name} ({size:,} bytes) is not a whole safetensors file: {exc}"
    return None


def checkpoint_problems(folder: Path) -> list[str]:
    """Every weight file of ``folder`` that cannot be read whole, and every shard its index names that is
    missing ([] = the files are whole; a folder without safetensors files has nothing to check here)."""
    folder = Path(folder)
    problems = []
    for index in sorted(p for suffix in INDEX_SUFFIXES for p in folder.glob(f"*{suffix}")):
        try:
            shards = set((json.loads(index.read_text(encoding="utf-8")).get("weight_map") or {}).values())
        except (OSError, ValueError, AttributeError):
            problems.append(f"{index.name} is not readable JSON")
            continue
        missing = sorted(s for s in shards if not (folder / s).is_file())
        if missing:
            problems.append(f"{index.name} names {len(missing)} missing shard(s): {', '.join(missing[:3])}")
    for path in sorted(folder.glob("*.safetensors")):
        problem = safetensors_problem(path)
        if problem is not None:
            problems.append(problem)
    return problems
