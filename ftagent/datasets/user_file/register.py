"""Registering a user file: checked where it is (read, profiled, scanned against the benchmark's items when they
are known), then copied -- never linked: the session must not change when the original does -- into
``FT_FILE_PATH/datasets/<name>/`` or the copy already there reused, and made a dataset of this process.

The name comes from the file's stem (``my_data``; ``user_<stem>`` when a built-in dataset has that name).
The same content again reuses the copy; a changed file under a name already taken gets a new copy named
``<stem>_<sha8>`` (a resumed session keeps training on the copy it started with).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from filelock import FileLock

from ftagent.core.errors import UserInputError
from ftagent.datasets.base import DatasetSpec, FunctionSource
from ftagent.datasets.user_file.convert import converter_code, to_alpaca
from ftagent.datasets.user_file.folder import LF_INFO_FILE, write_folder
from ftagent.datasets.user_file.info import INFO_FILE, UserDataset, read_info
from ftagent.datasets.user_file.layout import Layout, detect_layout
from ftagent.datasets.user_file.reading import read_records

LICENSE = "your own file"
_CREATED: set[str] = set()  # copies this process made (a contaminated one is removed again)


def register_user_file(path: Path, datasets_root: Path, reserved: set[str] | frozenset[str] = frozenset(),
                       items: dict[str, Any] | None = None,
                       answers: Mapping[str, str] = MappingProxyType({})) -> UserDataset:
    """Check ``path``, copy it into ``datasets_root/<name>/`` (or reuse the copy) and register it.

    Args:
        path: the user's file.
        datasets_root: ``FT_FILE_PATH/datasets``.
        reserved: names the copy must not take (the built-in datasets).
        items: the benchmark's validation and test items, when known before anything is written (a
            local-file benchmark): the file is scanned against them first (issue 34.12).
        answers: their gold answers (item id → text), for the scan's numeric match.

    Raises:
        UserInputError: a bad file (see :func:`read_records`, :func:`detect_layout`) or, with ``items``,
            one holding benchmark items; nothing is copied or locked then.
    """
    path = Path(path).expanduser().absolute()
    records = read_records(path)
    layout = detect_layout(path, records)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    scan = "" if items is None else scan_before_copy(path, len(records), layout, items, answers)
    root = Path(datasets_root)
    root.mkdir(parents=True, exist_ok=True)
    for name in candidate_names(path, digest, reserved):
        with FileLock(str(root / f".{name}.lock"), timeout=600):
            found = read_info(root / name)
            if found is not None and found.sha256 == digest:
                found.reused, found.scan = True, scan
                register_source(found)
                return found
            if (root / name).exists():
                continue  # taken by another file (or a folder placed by hand): next name
            info = UserDataset(name=name, source_path=str(path), file_name=_copy_name(path), sha256=digest,
                               rows=len(records), registered_at=time.time(), scan=scan, **layout.model_dump())
            write_folder(path, root / name, info, records if layout.format == "alpaca" else None)
            _CREATED.add(name)
            register_source(info)
            return info
    raise UserInputError(f"--dataset {path}: every name for this file is taken under {root}")  # unreachable


def scan_before_copy(path: Path, rows: int, layout: Layout, items: dict[str, Any],
                     answers: Mapping[str, str]) -> str:
    """:func:`check_against_benchmark` on the user's file where it is, before any copy, lock or registration.

    The converter reads a dataset folder (its code is shown to the planner as it is), so it is given a
    throw-away one in the system's temp folder: the description and a link to the file -- nothing is
    written under ``FT_FILE_PATH``. Returns the scan's line; raises UserInputError as the scan does.
    """
    import tempfile

    info = UserDataset(name=path.stem, source_path=str(path), file_name=_copy_name(path), sha256="", rows=rows,
                       **layout.model_dump())
    with tempfile.TemporaryDirectory(prefix="ftagent-scan-") as tmp:
        (Path(tmp) / INFO_FILE).write_text(info.model_dump_json(), encoding="utf-8")
        (Path(tmp) / info.file_name).symlink_to(path)
        check_against_benchmark(info, Path(tmp), items, answers)  # not one of _CREATED: nothing to remove
    return info.scan


def candidate_names(path: Path, digest: str, reserved: set[str] | frozenset[str]) -> list[str]:
    """``<stem>`` (``user_<stem>`` if reserved), then ``<that>_<sha8>`` for a changed file."""
    stem = re.sub(r"[^a-z0-9]+", "_", path.stem.lower()).strip("_") or "data"
    base = f"user_{stem}" if stem in reserved or stem == "all" else stem
    return [base, f"{base}_{digest[:8]}"]


def _copy_name(path: Path) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", path.name)
    return name if not name.startswith(".") and name != LF_INFO_FILE else "data" + path.suffix.lower()


def user_source(info: UserDataset) -> FunctionSource:
    """The registry entry of a user file: its spec, the generic converter and its notes."""
    spec = DatasetSpec(name=info.name, repo_id=None, related_benchmarks=[], license=LICENSE,
                       task_type=f"user file ({info.format})",
                       summary=f"{info.rows:,} rows from {Path(info.source_path).name} ({info.format})")
    return FunctionSource(spec=spec, converter=to_alpaca, generator=_no_regeneration,
                          code=lambda: converter_code(info.file_name, info.format))


def _no_regeneration(dataset_dir: Path) -> None:
    raise UserInputError(f"{Path(dataset_dir).name} is a copy of your own file: pass the file again as "
                         "--dataset FILE to register it anew")


def register_source(info: UserDataset) -> None:
    """Make ``info.name`` a dataset of this process (lookups, converter source, notes)."""
    from ftagent.datasets.registry import register_user_source

    register_user_source(info.name, user_source(info))


def register_existing(datasets_root: Path) -> list[str]:
    """Register every user file's copy under ``datasets_root`` (a resumed session's dataset among them)."""
    root = Path(datasets_root)
    names = []
    for info_path in sorted(root.glob(f"*/{INFO_FILE}")) if root.is_dir() else []:
        info = read_info(info_path.parent)
        if info is not None and info.name == info_path.parent.name:
            register_source(info)
            names.append(info.name)
    return names


def check_against_benchmark(info: UserDataset, folder: Path, items: dict[str, Any],
                            answers: Mapping[str, str]) -> int:
    """The contamination scan of the built-in datasets' generated rows, on the whole user file.

    Returns the rows checked. Raises UserInputError naming how many rows hold benchmark items and the
    first row's index and item id -- never the item's text (the test split stays hidden). A copy this
    process made is removed then (the fixed file takes the name again); an older one stays, as a
    session may have trained on it.
    """
    from ftagent.core.errors import StepError
    from ftagent.datasets.contamination import check_contamination

    rows = to_alpaca(folder, None, None, keep_all=True)
    if not items:
        info.scan = "no benchmark items to scan it against"
        return len(rows)
    try:
        check_contamination(rows, items, answers=answers, examples=1)
        info.scan = (f"contamination scan: none of its {len(rows):,} rows holds one of {len(items):,} benchmark items "
                     "(the contamination rule's checks 1-4: its questions ask no item, in this wording or any "
                     "other the check reads)")
    except StepError as exc:
        if info.name in _CREATED:
            shutil.rmtree(folder, ignore_errors=True)
            _CREATED.discard(info.name)
        first = ((exc.details or {}).get("examples") or [{}])[0]
        spaces = (exc.details or {}).get("input_spaces") or []
        held = (f"{exc.details.get('flagged_rows')} of {len(rows)} rows contain items of the benchmark's validation "
                f"or test split (first: row {first.get('row_index')}, counted from 0, holds benchmark item "
                f"{first.get('item_id')})" if first else f"its {len(rows)} rows answer most of a benchmark input space")
        raise UserInputError(
            f"--dataset {info.source_path}: {held}" + (f"; {spaces[0]}" if spaces else "")
            + "; remove them -- training on evaluation items makes the score meaningless") from exc
    return len(rows)
