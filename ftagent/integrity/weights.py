"""The ``weights`` check: the candidate's tensors descend from the base's.

No torch, no safetensors package (ftagent's own environment has neither): a ``.safetensors`` file is an
8-byte little-endian header length, a JSON header (``name -> {dtype, shape, data_offsets}``) and the raw
little-endian tensor bytes (https://github.com/huggingface/safetensors, README "Format"), read here with
:mod:`struct` / :mod:`array`.

:func:`weight_distance_check` — cosine similarity (and relative L2 distance ``‖c − b‖ / ‖b‖``, shown) of a
few sampled tensors (the embeddings, the first and the last layer's attention query): a fine-tune stays
correlated with its base, another checkpoint is not. Calibrated on ``builtin/tiny-qwen2`` (see
:data:`MIN_WEIGHT_COSINE`).
"""

from __future__ import annotations

import json
import re
import struct
from array import array
from pathlib import Path
from typing import Any

from ftagent.engine.events import CheckVerdict

#: Below this cosine similarity on any sampled tensor the weights do not descend from the base.
#: Calibration (measured on builtin/tiny-qwen2, the CPU demo's full fine-tune: lr 1e-3, 300 steps, and
#: tests/unit/test_integrity_redteam.py): that aggressive toy fine-tune keeps cosine 0.42 on the embeddings
#: and 0.78-0.96 on the layers' weights (relative L2 distances up to 2.3: the distance alone cannot tell
#: it from another checkpoint), while an independently initialised checkpoint of the same architecture is
#: at cosine ~0 (independent draws: |cos| ~ 1/sqrt(elements), < 0.02 for the >= 4,096 elements sampled).
#: Fine-tunes of large models move weights far less (relative distance < 0.1, cosine > 0.99). 0.1 leaves
#: room on both sides. A checkpoint derived from the same base (its instruct version) is close by design
#: and is not caught by this check (docs/benchmarks.md, "Integrity guard").
MIN_WEIGHT_COSINE = 0.1
SAMPLE_ELEMENTS = 1 << 16  # at most this many elements read per tensor (64 evenly spaced runs)
_RUNS = 64
_DTYPES = {"F32": 4, "F16": 2, "BF16": 2}


# -- safetensors, read without the package -----------------------------------------------------------
def _header(path: Path) -> tuple[dict[str, Any], int]:
    with open(path, "rb") as fh:
        (size,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(size))
    header.pop("__metadata__", None)
    return header, 8 + size


def tensor_index(folder: Path) -> dict[str, tuple[Path, dict[str, Any], int]]:
    """``name -> (file, header entry, data start)`` over the folder's safetensors files (sharded or not)."""
    folder = Path(folder)
    files = sorted(folder.glob("*.safetensors"))
    out: dict[str, tuple[Path, dict[str, Any], int]] = {}
    for path in files:
        try:
            header, start = _header(path)
        except (OSError, ValueError, struct.error):
            continue
        for name, entry in header.items():
            out[name] = (path, entry, start)
    return out


def _decode(raw: bytes, dtype: str) -> list[float]:
    if dtype == "F32":
        values = array("f")
        values.frombytes(raw)
    elif dtype == "BF16":  # the high half of an IEEE float32
        halves = array("H")
        halves.frombytes(raw)
        values = array("f")
        values.frombytes(array("I", (h << 16 for h in halves)).tobytes())
    else:  # F16
        return list(struct.unpack(f"<{len(raw) // 2}e", raw))
    if values.itemsize and struct.pack("=I", 1) != struct.pack("<I", 1):  # pragma: no cover - big-endian host
        values.byteswap()
    return list(values)


def sample_tensor(entry: tuple[Path, dict[str, Any], int], elements: int = SAMPLE_ELEMENTS) -> list[float] | None:
    """Up to ``elements`` values of one tensor, as :data:`_RUNS` evenly spaced runs (the same positions for
    two tensors of one shape); None for a dtype other than F32/F16/BF16."""
    path, meta, start = entry
    width = _DTYPES.get(meta.get("dtype", ""))
    if width is None:
        return None
    lo, hi = meta["data_offsets"]
    count = (hi - lo) // width
    run = max(1, min(count, elements) // _RUNS)
    step = max(run, count // _RUNS)
    out: list[float] = []
    with open(path, "rb") as fh:
        for first in range(0, count, step):
            n = min(run, count - first)
            fh.seek(start + lo + first * width)
            out.extend(_decode(fh.read(n * width), meta["dtype"]))
            if len(out) >= elements:
                break
    return out


def relative_distance(candidate: list[float], base: list[float]) -> float:
    """``‖c − b‖ / ‖b‖`` (inf when the base is all zeros and the candidate is not)."""
    num = sum((c - b) ** 2 for c, b in zip(candidate, base, strict=True)) ** 0.5
    den = sum(b * b for b in base) ** 0.5
    return num / den if den else (0.0 if num == 0 else float("inf"))


def _layer(name: str) -> int | None:
    found = re.search(r"\.layers\.(\d+)\.", name)
    return int(found.group(1)) if found else None


def sampled_names(names: list[str]) -> list[str]:
    """The tensors compared: the embeddings and the first and last layer's 2-D weights (q_proj first)."""
    picked = [n for n in names if "embed_tokens" in n][:1]
    layers = sorted({i for n in names if (i := _layer(n)) is not None})
    for layer in (layers[:1] + layers[-1:]) if layers else []:
        inside = sorted(n for n in names if _layer(n) == layer and n.endswith(".weight"))
        q = [n for n in inside if "q_proj" in n]
        picked += (q or inside)[:1]
    return list(dict.fromkeys(picked)) or sorted(names)[:3]


def cosine(candidate: list[float], base: list[float]) -> float:
    """Cosine similarity of two equally long vectors (0 when either is all zeros)."""
    dot = sum(c * b for c, b in zip(candidate, base, strict=True))
    norm = (sum(c * c for c in candidate) * sum(b * b for b in base)) ** 0.5
    return dot / norm if norm else 0.0


def weight_distance_check(base: Path, candidate: Path, *, min_cosine: float = MIN_WEIGHT_COSINE) -> CheckVerdict:
    """Every sampled tensor's cosine similarity to the base's is at least ``min_cosine``."""
    base, candidate = Path(base), Path(candidate)
    if (candidate / "adapter_config.json").is_file():
        return CheckVerdict(name="weights", passed=None,
                            detail="LoRA adapter: checked by its declared base (architecture)")
    b_idx, c_idx = tensor_index(base), tensor_index(candidate)
    if not c_idx:
        return CheckVerdict(name="weights", passed=False, detail="no safetensors weights in the candidate")
    common = [n for n in c_idx if n in b_idx and c_idx[n][1].get("shape") == b_idx[n][1].get("shape")]
    if not common:
        return CheckVerdict(name="weights", passed=False, detail="no tensor shared with the base (name and shape)")
    measured: dict[str, tuple[float, float]] = {}
    for name in sampled_names(sorted(common)):
        cand, ref = sample_tensor(c_idx[name]), sample_tensor(b_idx[name])
        if cand is None or ref is None or len(cand) != len(ref) or not any(ref):
            continue
        measured[name] = (cosine(cand, ref), relative_distance(cand, ref))
    if not measured:
        return CheckVerdict(name="weights", passed=None, detail="no comparable tensor (dtype)")
    worst = min(measured, key=lambda n: measured[n][0])
    cos, dist = measured[worst]
    ok = cos >= min_cosine
    return CheckVerdict(name="weights", passed=ok,
                        detail=f"min cosine to the base {cos:.3f} (relative L2 distance {dist:.3g}; {worst}; "
                                 f"{len(measured)} tensors sampled; limit {min_cosine:g})")
