"""A benchmark's prepared folder, ``<root>/<key>``: prepared once per limit, split rule, scoring rules and rows.

:func:`prepare_benchmark` prepares it for a command without a session (``ftagent eval``, benches);
:func:`prepare_session_copy` prepares it and freezes the session's own copy (:mod:`ftagent.benchmarks.frozen`);
:func:`is_prepared` says, reading only, whether it is current (start-up's contamination scan before anything is
written). A ``prepared.json`` marker records what it was prepared for; one preparation runs at a time across
processes (a file lock beside the folder).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from filelock import FileLock

    from ftagent.benchmarks.base import BenchmarkAdapter
    from ftagent.benchmarks.checked import CheckedItems


def _prepare_lock(root: Path, key: str) -> FileLock:
    """One preparation of ``root/<key>`` at a time across processes (sessions, ``ftagent eval``)."""
    from filelock import FileLock

    Path(root).mkdir(parents=True, exist_ok=True)
    return FileLock(str(Path(root) / f".{key}.prepare.lock"), timeout=6 * 3600)


def _prepare(adapter: BenchmarkAdapter, root: Path, limit: int | None, items: CheckedItems | None) -> Path:
    """Prepare ``root/<key>`` unless current. A benchmark of local files is prepared from its rows: ``items``,
    the ones start-up checked (read once), else read now -- a folder written from other rows is prepared again."""
    from ftagent.benchmarks.checked import ChecksData

    key = adapter.spec.key
    out = Path(root) / key
    if isinstance(adapter, ChecksData):
        items = items if items is not None else adapter.check_data(root, limit)
        digest = items.digest if items is not None else None
        if is_prepared(root, key, limit, items=digest):
            return out
        adapter.prepare(root, limit=limit, items=items)
    else:
        digest = None
        if is_prepared(root, key, limit):
            return out
        adapter.prepare(root, limit=limit)
    (out / "prepared.json").write_text(json.dumps(_wanted(limit, digest)), encoding="utf-8")
    return out


def prepare_benchmark(adapter: BenchmarkAdapter, root: Path, limit: int | None) -> Path:
    """Prepare ``root/<key>`` once per ``limit``, split rule and scoring rules (a marker records them).

    ``adapter``: the resolved benchmark (the session's, from start-up; a tool looks its key up itself).
    """
    with _prepare_lock(root, adapter.spec.key):
        return _prepare(adapter, root, limit, None)


def prepare_session_copy(adapter: BenchmarkAdapter, root: Path, limit: int | None,
                         items: CheckedItems | None) -> tuple[Path, str]:
    """Prepare ``root/<key>`` and freeze it as the session's own copy (:mod:`ftagent.benchmarks.frozen`), under
    the preparation lock, so no other command's preparation can interleave with the copy. ``items``: the rows
    start-up read and checked (:attr:`ResolvedRun.checked_items`; None: none were read).

    Returns:
        ``(frozen root, content digest)``.
    """
    from ftagent.benchmarks.frozen import freeze

    with _prepare_lock(root, adapter.spec.key):
        _prepare(adapter, root, limit, items)
        return freeze(root, adapter.spec.key)


def _wanted(limit: int | None, items: str | None = None) -> dict:
    from ftagent.benchmarks.base import PREPARED_SPLITS
    from ftagent.benchmarks.components import SCORING_VERSION
    from ftagent.benchmarks.splits import SPLIT_VERSION

    wanted = {"limit": limit, "split_rule": SPLIT_VERSION, "scoring": SCORING_VERSION, "splits": list(PREPARED_SPLITS)}
    return wanted | ({"items": items} if items is not None else {})


def is_prepared(root: Path, key: str, limit: int | None, *, items: str | None = None) -> bool:
    """``root/<key>`` holds what :func:`prepare_benchmark` would write now (reading only).

    A folder split by an older rule, or whose golds older scoring rules wrote, is prepared again ... and a
    folder without the final evaluation's "full" split too; with ``items`` (a :class:`CheckedItems` digest),
    one written from other rows.
    """
    marker = Path(root) / key / "prepared.json"
    try:
        found = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if items is None and isinstance(found, dict):
        found.pop("items", None)
    return bool(found == _wanted(limit, items))


def items_before_writing(key: str, checked: CheckedItems | None, input_columns: list[str], answer_column: str,
                         bench_dir: Path, limit: int | None) -> tuple[dict[str, list[str]], dict[str, str]] | None:
    """The contamination scan's items and their gold answers, read without writing (issue 34.12): a
    contaminated ``--dataset`` file is refused before it is copied, the model is built or anything is prepared.

    A local-file benchmark's come from ``checked`` (its rows, read by ``check_data``), keyed as the scan after
    preparing keys them (the merged ``<key>/<split>.jsonl``); another's from its prepared folder ``bench_dir``
    when that is current for ``limit``. None when it is not prepared yet: its items exist only once it is
    downloaded or generated, and the scenario scans the file then (after the model and data sets are prepared).
    """
    from ftagent.benchmarks.frozen import keyed_answers, keyed_items, scan_answers, scan_items

    if checked is not None:
        splits = ("validation", "test")
        items = {k: v for split in splits for k, v in keyed_items(key, split, checked.split(split), input_columns).items()}
        answers = {k: v for split in splits
                   for k, v in keyed_answers(key, split, checked.split(split), answer_column).items()}
        return items, answers
    if is_prepared(bench_dir.parent, key, limit):
        return scan_items(bench_dir, input_columns), scan_answers(bench_dir, answer_column)
    return None
