"""Tensors compared with the base's, streamed side by side: the cosine similarity of each pair over all its
values, and how far each value moved from the value the run started from against how far the run could move
it (:mod:`ftagent.integrity.movement`), read :data:`~ftagent.integrity.safetensors_io.CHUNK_ELEMENTS` at a
time, several tensors at once. The rules that use them: :mod:`ftagent.integrity.weights` (full models),
:mod:`ftagent.integrity.lora`.

**Rounding.** A value is stored in the candidate's dtype and the run started from the base's value as
LLaMA-Factory loaded it (in its compute dtype, BF16 at the coarsest: ``hparams/parser.py`` ``get_train_args``,
``model/patcher.py`` ``infer_optim_dtype``), so each value may also differ by the unit roundoff of BF16 times the
start value, of the candidate's dtype times the stored value, and by FP16's smallest step (:func:`allowed`).
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ftagent.engine.events import CheckVerdict
from ftagent.integrity.movement import ElementBound
from ftagent.integrity.safetensors_io import DECODABLE, WIDTHS, TensorEntry, raw_chunks, value_chunks

MIN_WEIGHT_COSINE = 0.1  # calibration: ftagent.integrity.weights
#: tensors (and files) read at once: numpy and hashlib release the GIL, so each uses a core
WORKERS = max(1, min(8, os.cpu_count() or 1))
#: unit roundoff of each stored dtype (half a unit in the last place, relative); integers are exact
ROUNDOFF = {"F64": 2.0 ** -53, "F32": 2.0 ** -24, "F16": 2.0 ** -11, "BF16": 2.0 ** -8}
LOAD_ROUNDOFF = 2.0 ** -8  # BF16, the coarsest dtype LLaMA-Factory loads the start weights in
TINY = 2.0 ** -24  # FP16's smallest subnormal step, for values loaded near zero
Floats = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Movement:
    """How far the candidate's values may be from the start's: ``bound`` (the run's) plus rounding."""

    bound: ElementBound
    start: TensorEntry | None = None  # the start values when they are not the base's (a chained loop)


def allowed(bound: ElementBound, start: Floats, cand: Floats, dtype: str) -> Floats:
    """Per value, how far the candidate may be from its start (the run's bound plus rounding, module doc),
    in float32 with two temporaries (a chunk of 2M values costs 16 MB more per worker)."""
    out = np.abs(start)
    out *= np.float32(bound.relative + LOAD_ROUNDOFF)
    out += np.float32(bound.absolute + TINY)
    stored = np.abs(cand)
    stored *= np.float32(ROUNDOFF.get(dtype, 0.0))
    out += stored
    return out


def rows(entry: TensorEntry, count: int) -> TensorEntry:
    """The first ``count`` rows of a 2-D tensor (row-major: its first ``count * width`` values)."""
    width = entry.shape[1]
    return TensorEntry(file=entry.file, dtype=entry.dtype, shape=(count, width), start=entry.start,
                       nbytes=count * width * WIDTHS[entry.dtype])


def grown(cand: TensorEntry, base: TensorEntry, vocab_sizes: frozenset[int]) -> TensorEntry | None:
    """The base's rows of an embedding the run grew to a vocabulary size the validated run has (else None):
    LLaMA-Factory appends the new tokens' rows (:mod:`ftagent.integrity.trained_run`)."""
    if (len(cand.shape) == 2 and len(base.shape) == 2 and cand.shape[1] == base.shape[1]
            and cand.shape[0] > base.shape[0] and cand.shape[0] in vocab_sizes):
        return rows(cand, base.shape[0])
    return None


def pair_stats(cand: TensorEntry, base: TensorEntry,
               bound: ElementBound | None = None) -> tuple[float, float, float, bool, float]:
    """(dot, candidate sq norm, base sq norm, finite, the largest value's movement over what it may move) of
    two same-shaped tensors, streamed side by side (the movement is 0 without a ``bound``)."""
    dot = c_sq = b_sq = worst = 0.0
    for c, b in zip(value_chunks(cand), value_chunks(base), strict=True):
        dot += float(np.dot(c, b))
        c_sq += float(np.dot(c, c))
        b_sq += float(np.dot(b, b))
        if bound is not None and c.size:
            worst = max(worst, _moved(c, b, bound, cand.dtype))
    return dot, c_sq, b_sq, all(math.isfinite(x) for x in (dot, c_sq, b_sq)), worst


def _moved(cand: Floats, start: Floats, bound: ElementBound, dtype: str) -> float:
    """The largest ``|cand - start| / allowed`` over one chunk. When even the largest ``|cand - start|`` is within
    the bound's absolute part, ``max |cand - start| / absolute`` is returned instead: no larger than 1 and no
    smaller than the exact ratio, for a third of the work (the usual case of an honest run)."""
    diff = np.subtract(cand, start)
    np.abs(diff, out=diff)
    floor = bound.absolute + TINY
    largest = float(np.max(diff))
    if largest <= floor:
        return largest / floor
    diff /= allowed(bound, start, cand, dtype)
    return float(np.max(diff))


def movement(cand: TensorEntry, start: TensorEntry, bound: ElementBound) -> float:
    """The largest ``|cand - start| / allowed`` over the values of two same-shaped tensors (streamed)."""
    worst = 0.0
    for c, s in zip(value_chunks(cand), value_chunks(start), strict=True):
        if c.size:
            worst = max(worst, _moved(c, s, bound, cand.dtype))
    return worst


def cosine_of(dot: float, c_sq: float, b_sq: float) -> float:
    """Cosine similarity from a dot product and two squared norms (0 when either is zero)."""
    return dot / math.sqrt(c_sq * b_sq) if c_sq > 0 and b_sq > 0 else 0.0


class Comparison:
    """The per-tensor results of one candidate: cosines, movements against the run's bound, tensors not
    comparable, problems."""

    def __init__(self, min_cosine: float) -> None:
        self.min_cosine = min_cosine
        self.cosines: dict[str, float] = {}
        self.moved: dict[str, float] = {}  # tensor -> its largest value's movement over what the run allows
        self.not_comparable: list[str] = []
        self.problems: list[str] = []
        self.bound_words = ""  # the run's bound, for the detail

    def add(self, name: str, cos: float) -> None:
        self.cosines[name] = cos

    def _movement_problem(self) -> list[str]:
        over = sorted(((m, n) for n, m in self.moved.items() if not m <= 1.0), reverse=True)
        if not over:
            return []
        return [f"{len(over)} of {len(self.moved)} tensors moved farther from where training started than the "
                f"run's optimizer can move them (" + ", ".join(f"{n} {m:.3g}x" for m, n in over[:3])
                + (", …" if len(over) > 3 else "") + f"; {self.bound_words})"]

    def verdict(self, what: str) -> CheckVerdict:
        below = sorted((c, n) for n, c in self.cosines.items() if not c >= self.min_cosine)
        problems = self.problems + (
            [f"{len(below)} of {len(self.cosines)} tensors below cosine {self.min_cosine:g} to the base ("
             + ", ".join(f"{n} {c:.3f}" for c, n in below[:3]) + (", …" if len(below) > 3 else "") + ")"]
            if below else []) + self._movement_problem()
        skipped = (f"; {len(self.not_comparable)} all-zero in the base (no direction to compare)"
                   if self.not_comparable else "")
        if problems:
            return CheckVerdict(name="weights", passed=False, detail=f"{what}: " + "; ".join(problems)[:900] + skipped)
        if not self.cosines and not self.moved:
            return CheckVerdict(name="weights", passed=None, detail=f"{what}: no tensor comparable with the base{skipped}")
        parts = []
        if self.cosines:
            worst = min(self.cosines, key=lambda n: self.cosines[n])
            parts.append(f"{len(self.cosines)} tensors compared, min cosine to the base {self.cosines[worst]:.3f} "
                         f"({worst}; limit {self.min_cosine:g})")
        if self.moved:
            far = max(self.moved, key=lambda n: self.moved[n])
            parts.append(f"largest movement {self.moved[far]:.3g} of the run's bound ({far}; {self.bound_words})")
        return CheckVerdict(name="weights", passed=True, detail=f"{what}: " + "; ".join(parts) + skipped)


Result = tuple[str, float | str, float | None]


def _measure(cand: TensorEntry, base: TensorEntry, move: Movement | None) -> Result:
    """One candidate tensor against the base's: ``("cos", value, movement)``, ``("zero", 0, movement)`` (the
    base's is all zeros) or ``("problem", what, None)``. The movement is measured against ``move.start``, or
    the base in the same pass, when ``move`` is given (else None)."""
    if cand.shape != base.shape:
        return "problem", f"has shape {list(cand.shape)}, the base's {list(base.shape)}", None
    if cand.dtype not in DECODABLE or base.dtype not in DECODABLE:
        if cand.dtype != base.dtype or list(raw_chunks(cand)) != list(raw_chunks(base)):
            return "problem", f"({cand.dtype}) differs from the base's ({base.dtype}) and cannot be decoded", None
        return "cos", 1.0, 0.0 if move is not None else None
    same_pass = move is not None and move.start is None
    dot, c_sq, b_sq, finite, worst = pair_stats(cand, base, move.bound if same_pass and move else None)
    if not finite:
        return "problem", "holds values that are not finite", None
    moved: float | None = worst if same_pass else None
    if move is not None and move.start is not None:
        if move.start.shape != cand.shape or move.start.dtype not in DECODABLE:
            return "problem", f"does not fit the start weights' tensor {list(move.start.shape)}", None
        moved = movement(cand, move.start, move.bound)
    return ("zero", 0.0, moved) if b_sq == 0 else ("cos", cosine_of(dot, c_sq, b_sq), moved)


Pair = tuple[TensorEntry, TensorEntry, Movement | None]


def compare_tensors(out: Comparison, pairs: dict[str, Pair]) -> None:
    """Candidate tensors against the base's of the same name (see the module doc), several at once."""
    names = list(pairs)
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        results = list(pool.map(lambda n: _measure(*pairs[n]), names))
    for name, (kind, value, moved) in zip(names, results, strict=True):
        if kind == "problem":
            out.problems.append(f"{name} {value}")
            continue
        if moved is not None:
            out.moved[name] = moved
        if kind == "zero":
            out.not_comparable.append(name)
        else:
            out.add(name, float(value))
