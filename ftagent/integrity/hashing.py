"""File hashes the guard records and compares: one file's SHA-256, a tree's ``path -> sha256``, and what
changed between two such records."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path


def file_sha256(path: Path, chunk: int = 1 << 20) -> str:
    """The SHA-256 of one file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def tree_hashes(roots: Iterable[Path], *, suffixes: tuple[str, ...] | None = None) -> dict[str, str]:
    """``path -> sha256`` of every file under ``roots`` (a file root is hashed itself); ``suffixes``
    limits which files count (e.g. ``(".py",)`` for source trees). Caches (``__pycache__``) are skipped."""
    out: dict[str, str] = {}
    for root in roots:
        root = Path(root)
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else []
        for path in files:
            if "__pycache__" in path.parts or (suffixes and path.suffix not in suffixes):
                continue
            out[str(path)] = file_sha256(path)
    return out


def changed_files(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Files added, removed or edited between two :func:`tree_hashes` (sorted)."""
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
