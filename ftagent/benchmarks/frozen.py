"""A session's own immutable, content-hashed copy of its benchmark items (issue 39 item 6).

``FT_FILE_PATH/benchmarks/<key>`` is shared: ``ftagent eval`` without a limit, another session with another
``FT_BENCHMARK_LIMIT`` or a newer split rule prepares it again (issue 39: two running sessions' next
candidates were then flagged ``benchmark_files``, scored on other items than their baseline, and lost their
interval). **Rule: a session evaluates on its own copy, and preparing for another command never changes
it.** Mechanism:

* at start-up, right after the shared folder is prepared, :func:`freeze` copies every prepared file (the
  split files, ``spec.json``, ``prepared.json``; not ``raw/``, the downloaded sources, which stays a link to
  the shared one: only the few-shot rounds of FinanceIQ read it, on ftagent's side) into
  ``FT_FILE_PATH/benchmarks/.frozen/<key>-<digest>/<key>``, named by the SHA-256 of its contents
  (:func:`content_digest`), written into a temporary folder and renamed into place (atomic), its files and
  files made read-only;
* the session records the copy's root and digest (``ScenarioInfo.benchmark_root`` / ``benchmark_digest``,
  in the snapshot: a resume uses the same copy), and every evaluation of the session -- the baseline, each
  loop, the final evaluation -- renders its OpenCompass datasets from that root and never prepares;
  the contamination scan, the integrity guard (its ``benchmark_files`` hashes) and the brief read it too;
* nothing writes into ``.frozen``: preparation writes ``benchmarks/<key>`` only, a copy with the same
  contents is the same folder (two sessions share it), another content is another folder.

:func:`verify` re-hashes a copy: the guard's ``benchmark_files`` check still catches an edit of it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from pathlib import Path

FROZEN = ".frozen"  # under FT_FILE_PATH/benchmarks; "." : never a benchmark key
RAW = "raw"


def _files(bench_dir: Path) -> list[Path]:
    """The prepared files of ``bench_dir`` (relative, sorted): no ``raw/``, no hidden temp or lock files."""
    out = []
    for path in sorted(bench_dir.rglob("*")):
        rel = path.relative_to(bench_dir)
        if rel.parts[0] == RAW or any(p.startswith(".") for p in rel.parts) or not path.is_file():
            continue
        out.append(rel)
    return out


def _sha(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def content_digest(bench_dir: Path) -> str:
    """SHA-256 over every prepared file's relative path and SHA-256."""
    h = hashlib.sha256()
    for rel in _files(Path(bench_dir)):
        h.update(f"{rel.as_posix()}\0{_sha(Path(bench_dir) / rel)}\n".encode())
    return h.hexdigest()


def frozen_root(benchmarks_root: Path, key: str, digest: str) -> Path:
    """The root a frozen copy is evaluated from (it holds ``<key>/``, as ``benchmarks_root`` does)."""
    return Path(benchmarks_root) / FROZEN / f"{key}-{digest[:16]}"


def _read_only(folder: Path) -> None:
    """Files read-only (folders stay writable, so that a user's ``rm -rf`` of old copies works)."""
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            path.chmod(stat.S_IMODE(path.stat().st_mode) & ~0o222)


def freeze(benchmarks_root: Path, key: str) -> tuple[Path, str]:
    """Copy the prepared ``benchmarks_root/<key>`` into its content-addressed frozen folder (once).

    Returns:
        ``(root, digest)``: evaluate with ``root`` as the benchmarks root (``root/<key>`` holds the items).
    """
    source = Path(benchmarks_root) / key
    digest = content_digest(source)
    root = frozen_root(benchmarks_root, key, digest)
    if (root / key).is_dir() and content_digest(root / key) == digest:
        return root, digest
    staging = root.with_name(f".{root.name}.{os.getpid()}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    for rel in _files(source):
        (staging / key / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / rel, staging / key / rel)
    (staging / key).mkdir(parents=True, exist_ok=True)
    if (source / RAW).is_dir():  # the downloaded sources: read by ftagent only (few-shot rounds), never copied
        (staging / key / RAW).symlink_to((source / RAW).resolve(), target_is_directory=True)
    _read_only(staging / key)
    try:
        staging.rename(root)
    except OSError:  # another session froze the same content first: theirs is ours
        shutil.rmtree(staging, ignore_errors=True)
        if content_digest(root / key) != digest:
            raise
    return root, digest


def verify(root: Path, key: str, digest: str) -> bool:
    """The frozen copy still holds what it was frozen with."""
    folder = Path(root) / key
    return folder.is_dir() and content_digest(folder) == digest


def keyed_items(where: str, split: str, rows: list[dict], input_columns: list[str]) -> dict[str, list[str]]:
    """The contamination scan's items of one split file's rows: ``<where>/<split>:<index>`` → the input fields
    (``where``: the folder of the split file, the benchmark's key for its merged ``<split>.jsonl``)."""
    return {f"{where}/{split}:{i}": [str(row.get(f, "")) for f in input_columns] for i, row in enumerate(rows)}


def keyed_answers(where: str, split: str, rows: list[dict], answer_column: str) -> dict[str, str]:
    """The gold answers of one split file's rows, keyed as :func:`keyed_items` keys the items (the scan's
    numeric match reads an item's numbers and its gold: :mod:`ftagent.datasets.numeric_scan`)."""
    return {f"{where}/{split}:{i}": str(row.get(answer_column) or "") for i, row in enumerate(rows)}


def scan_answers(folder: Path, answer_column: str) -> dict[str, str]:
    """Every validation and test item's gold answer of a prepared benchmark folder, keyed as :func:`scan_items`."""
    from ftagent.benchmarks.base import read_jsonl

    answers: dict[str, str] = {}
    for split in ("validation", "test"):
        for path in sorted(Path(folder).glob(f"**/{split}.jsonl")):
            answers.update(keyed_answers(path.parent.name, split, read_jsonl(path), answer_column))
    return answers


def scan_items(folder: Path, input_columns: list[str]) -> dict[str, list[str]]:
    """Every validation and test item of a prepared benchmark folder, as the contamination scan keys them."""
    from ftagent.benchmarks.base import read_jsonl

    items: dict[str, list[str]] = {}
    for split in ("validation", "test"):
        for path in sorted(Path(folder).glob(f"**/{split}.jsonl")):
            items.update(keyed_items(path.parent.name, split, read_jsonl(path), input_columns))
    return items
