"""Tensors compared with the base's, streamed side by side: the cosine similarity of each pair over all its
values, read :data:`~ftagent.integrity.safetensors_io.CHUNK_ELEMENTS` at a time, several tensors at once.
The rules that use them: :mod:`ftagent.integrity.weights` (full models), :mod:`ftagent.integrity.lora`."""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ftagent.engine.events import CheckVerdict
from ftagent.integrity.safetensors_io import DECODABLE, TensorEntry, raw_chunks, value_chunks

MIN_WEIGHT_COSINE = 0.1  # calibration: ftagent.integrity.weights
#: tensors (and files) read at once: numpy and hashlib release the GIL, so each uses a core
WORKERS = max(1, min(8, os.cpu_count() or 1))


def pair_stats(cand: TensorEntry, base: TensorEntry) -> tuple[float, float, float, bool]:
    """(dot, candidate sq norm, base sq norm, finite) of two same-shaped tensors, streamed side by side."""
    dot = c_sq = b_sq = 0.0
    for c, b in zip(value_chunks(cand), value_chunks(base), strict=True):
        dot += float(np.dot(c, b))
        c_sq += float(np.dot(c, c))
        b_sq += float(np.dot(b, b))
    return dot, c_sq, b_sq, all(math.isfinite(x) for x in (dot, c_sq, b_sq))


def cosine_of(dot: float, c_sq: float, b_sq: float) -> float:
    """Cosine similarity from a dot product and two squared norms (0 when either is zero)."""
    return dot / math.sqrt(c_sq * b_sq) if c_sq > 0 and b_sq > 0 else 0.0


class Comparison:
    """The per-tensor results of one candidate: cosines, tensors not comparable, problems."""

    def __init__(self, min_cosine: float) -> None:
        self.min_cosine = min_cosine
        self.cosines: dict[str, float] = {}
        self.not_comparable: list[str] = []
        self.problems: list[str] = []

    def add(self, name: str, cos: float) -> None:
        self.cosines[name] = cos

    def verdict(self, what: str) -> CheckVerdict:
        below = sorted((c, n) for n, c in self.cosines.items() if not c >= self.min_cosine)
        problems = self.problems + ([f"{len(below)} of {len(self.cosines)} tensors below cosine {self.min_cosine:g} "
                                     f"to the base (" + ", ".join(f"{n} {c:.3f}" for c, n in below[:3])
                                     + (", …" if len(below) > 3 else "") + ")"] if below else [])
        skipped = (f"; {len(self.not_comparable)} all-zero in the base (no direction to compare)"
                   if self.not_comparable else "")
        if problems:
            return CheckVerdict(name="weights", passed=False, detail=f"{what}: " + "; ".join(problems)[:600] + skipped)
        if not self.cosines:
            return CheckVerdict(name="weights", passed=None, detail=f"{what}: no tensor comparable with the base{skipped}")
        worst = min(self.cosines, key=lambda n: self.cosines[n])
        return CheckVerdict(name="weights", passed=True,
                            detail=f"{what}: {len(self.cosines)} tensors compared, min cosine to the base "
                                   f"{self.cosines[worst]:.3f} ({worst}; limit {self.min_cosine:g}){skipped}")


def _measure(cand: TensorEntry, base: TensorEntry) -> tuple[str, float | str]:
    """One candidate tensor against the base's: ``("cos", value)``, ``("zero", 0)`` (the base's is all zeros)
    or ``("problem", what)``."""
    if cand.shape != base.shape:
        return "problem", f"has shape {list(cand.shape)}, the base's {list(base.shape)}"
    if cand.dtype not in DECODABLE or base.dtype not in DECODABLE:
        if cand.dtype != base.dtype or list(raw_chunks(cand)) != list(raw_chunks(base)):
            return "problem", f"({cand.dtype}) differs from the base's ({base.dtype}) and cannot be decoded"
        return "cos", 1.0
    dot, c_sq, b_sq, finite = pair_stats(cand, base)
    if not finite:
        return "problem", "holds values that are not finite"
    return ("zero", 0.0) if b_sq == 0 else ("cos", cosine_of(dot, c_sq, b_sq))


def compare_tensors(out: Comparison, pairs: dict[str, tuple[TensorEntry, TensorEntry]]) -> None:
    """Candidate tensors against the base's of the same name (see the module doc), several at once."""
    names = list(pairs)
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        results = list(pool.map(lambda n: _measure(*pairs[n]), names))
    for name, (kind, value) in zip(names, results, strict=True):
        if kind == "problem":
            out.problems.append(f"{name} {value}")
        elif kind == "zero":
            out.not_comparable.append(name)
        else:
            out.add(name, float(value))
