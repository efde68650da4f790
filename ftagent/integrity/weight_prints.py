"""The base model's weights, fingerprinted once before any planner code runs (issue 39): each weight file's
SHA-256 and stat, each tensor's dtype, shape and squared norm; and the proof, at every check, that the base's
files are still those bytes. The rules that use them: :mod:`ftagent.integrity.weights`."""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field

from ftagent.integrity.safetensors_io import (
    DECODABLE,
    TensorEntry,
    WeightsError,
    decode,
    loader_view,
    open_regular,
    raw_chunks,
)
from ftagent.integrity.tensor_compare import WORKERS


class FileStamp(BaseModel):
    """One base weight file as it was when fingerprinted: its bytes' SHA-256 and its stat."""

    sha256: str
    size: int
    mtime_ns: int
    ctime_ns: int  # no unprivileged process can set it back: an unchanged stat is unchanged bytes
    inode: int


class TensorPrint(BaseModel):
    """One base tensor: where it is, its dtype and shape, and its squared L2 norm."""

    file: str
    dtype: str
    shape: list[int]
    sq_norm: float


class WeightPrints(BaseModel):
    """The base model's weights, fingerprinted before any planner code runs."""

    folder: str
    files: dict[str, FileStamp] = Field(default_factory=dict)
    tensors: dict[str, TensorPrint] = Field(default_factory=dict)
    problem: str = ""  # why the base has no comparable weights ("" when it has)


def _stat(path: Path) -> tuple[int, int, int, int]:
    st = os.stat(path, follow_symlinks=False)
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino


def _file_prints(path: Path, entries: dict[str, TensorEntry]) -> tuple[FileStamp, dict[str, TensorPrint]]:
    """One weight file's SHA-256 and its tensors' prints, in one streamed pass (header, then every tensor)."""
    digest = hashlib.sha256()
    with open_regular(path) as fh:
        digest.update(fh.read(min(e.start for e in entries.values())))
    tensors: dict[str, TensorPrint] = {}
    for name, entry in sorted(entries.items(), key=lambda item: item[1].start):
        sq = 0.0
        for block in raw_chunks(entry):
            digest.update(block)
            if entry.dtype in DECODABLE:
                values = decode(block, entry.dtype)
                sq += float(np.dot(values, values))
        tensors[name] = TensorPrint(file=path.name, dtype=entry.dtype, shape=list(entry.shape), sq_norm=sq)
    size, mtime, ctime, inode = _stat(path)
    return FileStamp(sha256=digest.hexdigest(), size=size, mtime_ns=mtime, ctime_ns=ctime, inode=inode), tensors


def fingerprint(folder: Path) -> WeightPrints:
    """Every base tensor's squared norm and every weight file's SHA-256 (one streamed pass per file, the
    files in parallel)."""
    view = loader_view(Path(folder))
    prints = WeightPrints(folder=str(folder))
    if view.problems or not view.tensors:
        prints.problem = "; ".join(view.problems) or "no safetensors weights (model.safetensors or an index)"
        return prints
    per_file = [{n: e for n, e in view.tensors.items() if e.file == path} for path in view.files]
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        for path, (stamp, tensors) in zip(view.files, pool.map(_file_prints, view.files, per_file), strict=True):
            prints.files[path.name] = stamp
            prints.tensors.update(tensors)
    return prints


def base_unchanged(prints: WeightPrints) -> str:
    """'' when every base weight file is still the fingerprinted one; else which changed. An unchanged stat
    (size, mtime, ctime, inode) is trusted; a changed one is hashed again."""
    changed = []
    for name, stamp in prints.files.items():
        path = Path(prints.folder) / name
        try:
            if _stat(path) == (stamp.size, stamp.mtime_ns, stamp.ctime_ns, stamp.inode):
                continue
            digest = hashlib.sha256()
            with open_regular(path) as fh:
                while block := fh.read(1 << 22):
                    digest.update(block)
            if digest.hexdigest() != stamp.sha256:
                changed.append(name)
        except (OSError, WeightsError):
            changed.append(name)
    return ", ".join(changed)
