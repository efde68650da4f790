"""The weights a loader reads from a model folder, streamed tensor by tensor from the safetensors bytes.

Which files are the model's weights (the ones the evaluation loads, and only those):

* a full model: the shards ``model.safetensors.index.json``'s ``weight_map`` names, else ``model.safetensors``
  (transformers 4.57 ``modeling_utils._get_resolved_checkpoint_files``: ``SAFE_WEIGHTS_INDEX_NAME``, then
  ``SAFE_WEIGHTS_NAME``). vLLM loads *every* ``*.safetensors`` of the folder when there is no index
  (``vllm/model_executor/model_loader/default_loader.py`` ``_prepare_weights``, ``allow_patterns``; with an
  index ``filter_duplicate_safetensors_files`` keeps the ``weight_map``'s): so another ``.safetensors`` file in
  the folder is a problem, not something to ignore;
* a LoRA adapter: ``adapter_model.safetensors`` (peft 0.18 ``utils/save_and_load.load_peft_weights``).

A tensor named in two files is a problem too (the loaders would disagree on which one wins).

Format (https://github.com/huggingface/safetensors, README "Format"), checked as safetensors' own
``SafeTensors::read_metadata`` checks it: an 8-byte little-endian header size (at most 100 MB), a JSON header
``name -> {dtype, shape, data_offsets}`` (plus ``__metadata__``), then the tensors' bytes, contiguous from
offset 0 to the end of the file, each exactly ``elements x dtype width`` long. The safetensors package
(ftagent's dependency since issue 43, :mod:`ftagent.models.checkpoint`) is not used to read values: its
numpy loader has no BF16 (``safetensors/numpy.py`` ``_TYPES``; 0.8.0 raises "data type 'bfloat16' not
understood"), it exposes no byte offsets to stream from, and ftagent's environment has no torch. Files are
opened without following a link and must be regular files (a FIFO would block the guard).
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import numpy as np
import numpy.typing as npt

from ftagent.core.untrusted import open_beneath

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
ADAPTER_FILE = "adapter_model.safetensors"
MAX_HEADER_BYTES = 100_000_000  # safetensors' MAX_HEADER_SIZE
CHUNK_ELEMENTS = 1 << 21  # values read at once per tensor (8 MiB as float32): memory stays bounded
#: dtype -> (bytes per value, numpy type of the little-endian values); BF16 is decoded by hand
WIDTHS = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "U64": 8, "I32": 4, "U32": 4, "I16": 2, "U16": 2,
          "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}
_NUMPY = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "U64": "<u8", "I32": "<i4", "U32": "<u4",
          "I16": "<i2", "U16": "<u2", "I8": "i1", "U8": "u1", "BOOL": "u1"}
DECODABLE = frozenset(_NUMPY) | {"BF16"}  # F8 formats: numpy has no type for them


class WeightsError(ValueError):
    """A weights file that is not a valid safetensors file (or cannot be opened safely)."""


@dataclass(frozen=True)
class TensorEntry:
    """Where one tensor's bytes are: its file, dtype, shape and absolute byte range."""

    file: Path
    dtype: str
    shape: tuple[int, ...]
    start: int
    nbytes: int

    @property
    def elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass
class WeightFiles:
    """The weights a loader reads from one folder: its files, every tensor, and what is wrong with them."""

    files: list[Path] = field(default_factory=list)
    tensors: dict[str, TensorEntry] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def open_regular(path: Path) -> IO[bytes]:
    """``path`` opened for reading, never through a link and only when it is a regular file
    (:func:`ftagent.core.untrusted.open_beneath` from the file's own folder)."""
    try:
        fd = open_beneath(Path(path).parent, Path(path).name)
    except OSError as exc:
        raise WeightsError(f"{Path(path).name}: {exc.strerror or exc}") from exc
    return os.fdopen(fd, "rb")


def read_header(path: Path) -> dict[str, TensorEntry]:
    """Every tensor of one safetensors file, after the format's own checks (see the module doc)."""
    with open_regular(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        head = fh.read(8)
        if len(head) != 8:
            raise WeightsError(f"{path.name}: shorter than a safetensors header")
        (n,) = struct.unpack("<Q", head)
        if n > MAX_HEADER_BYTES or 8 + n > size:
            raise WeightsError(f"{path.name}: header size {n} is invalid")
        try:
            header = json.loads(fh.read(n))
        except ValueError as exc:
            raise WeightsError(f"{path.name}: header is not JSON") from exc
    if not isinstance(header, dict):
        raise WeightsError(f"{path.name}: header is not a JSON object")
    header.pop("__metadata__", None)
    entries: dict[str, TensorEntry] = {}
    spans = []
    for name, meta in header.items():
        try:
            dtype, shape, (lo, hi) = meta["dtype"], tuple(int(d) for d in meta["shape"]), meta["data_offsets"]
        except (KeyError, TypeError, ValueError) as exc:
            raise WeightsError(f"{path.name}: tensor {name!r} has no dtype, shape or data_offsets") from exc
        entry = TensorEntry(file=Path(path), dtype=str(dtype), shape=shape, start=8 + n + int(lo), nbytes=int(hi) - int(lo))
        if entry.dtype not in WIDTHS or entry.nbytes != entry.elements * WIDTHS[entry.dtype]:
            raise WeightsError(f"{path.name}: tensor {name!r} ({dtype}, shape {list(shape)}) does not match its "
                               f"{entry.nbytes} bytes")
        entries[name] = entry
        spans.append((int(lo), int(hi)))
    end = 0
    for lo, hi in sorted(spans):
        if lo != end:
            raise WeightsError(f"{path.name}: tensor data is not contiguous (offset {lo}, expected {end})")
        end = hi
    if 8 + n + end != size:
        raise WeightsError(f"{path.name}: {size - 8 - n} data bytes, the header describes {end}")
    return entries


def _index_files(folder: Path) -> tuple[list[str], list[str]]:
    """(the shard names ``model.safetensors.index.json`` maps tensors to, problems)."""
    try:
        with open_regular(folder / INDEX_FILE) as fh:
            index = json.loads(fh.read())
        weight_map = index["weight_map"]
        return sorted({str(v) for v in weight_map.values()}), []
    except (WeightsError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return [], [f"{INDEX_FILE} is not a readable index ({exc})"]


def loader_view(folder: Path, *, adapter: bool = False) -> WeightFiles:
    """The weights the evaluation's loaders read from ``folder`` (see the module doc), with every problem."""
    folder = Path(folder)
    out = WeightFiles()
    present = sorted(p.name for p in folder.glob("*.safetensors"))
    if adapter:
        names = [ADAPTER_FILE] if ADAPTER_FILE in present else []
    elif (folder / INDEX_FILE).exists():
        names, out.problems = _index_files(folder)
        out.problems += [f"{name} is named by {INDEX_FILE} but missing" for name in names if name not in present]
        names = [name for name in names if name in present]
    else:
        names = [SINGLE_FILE] if SINGLE_FILE in present else []
    out.problems += [f"{name} is not one of the model's weight files, yet a loader may read it (vLLM loads every "
                     f"*.safetensors of a folder without an index)" for name in present if name not in names]
    for name in names:
        try:
            entries = read_header(folder / name)
        except WeightsError as exc:
            out.problems.append(str(exc))
            continue
        out.files.append(folder / name)
        for tensor, entry in entries.items():
            if tensor in out.tensors:
                out.problems.append(f"tensor {tensor} is in both {out.tensors[tensor].file.name} and {name}")
            out.tensors[tensor] = entry
    return out


def decode(raw: bytes | bytearray | memoryview, dtype: str) -> npt.NDArray[np.float32]:
    """Little-endian values of ``dtype`` as float32 (BF16: the high half of a float32)."""
    if dtype == "BF16":
        halves = np.frombuffer(raw, dtype="<u2")
        return (halves.astype("<u4") << 16).view("<f4").astype(np.float32, copy=False)
    return np.frombuffer(raw, dtype=_NUMPY[dtype]).astype(np.float32)


def raw_chunks(entry: TensorEntry, elements: int | None = None) -> Iterator[bytes]:
    """The tensor's bytes, ``elements`` values at a time (default :data:`CHUNK_ELEMENTS`)."""
    width = WIDTHS[entry.dtype]
    step = max(1, elements or CHUNK_ELEMENTS) * width
    with open_regular(entry.file) as fh:
        fh.seek(entry.start)
        left = entry.nbytes
        while left > 0:
            block = fh.read(min(step, left))
            if not block:
                raise WeightsError(f"{entry.file.name}: ends inside a tensor")
            left -= len(block)
            yield block


def value_chunks(entry: TensorEntry, elements: int | None = None) -> Iterator[npt.NDArray[np.float32]]:
    """The tensor's values as float32, ``elements`` at a time (two tensors of one shape chunk alike)."""
    for block in raw_chunks(entry, elements):
        yield decode(block, entry.dtype)
