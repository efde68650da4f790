"""The integrity guard's result types and file hashing (issue 31 item 5), shared by the checks
(:mod:`ftagent.models.integrity`, :mod:`ftagent.finetune.integrity`), the ``integrity`` event and the report.

A check is a pure function over files on disk; its verdict is ``passed`` True (clean), False (flagged:
the candidate cannot become SOTA) or None (not applicable here, e.g. a weight distance for a LoRA adapter,
which is checked by its declared base instead).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, Field


class IntegrityCheck(BaseModel):
    """One check's verdict on one candidate."""

    name: str  # tokenizer | chat_template | architecture | weights | benchmark_files | data_script |
    # contamination | constant_answers
    passed: bool | None = None  # None: not applicable / nothing to check
    detail: str = ""

    @property
    def flagged(self) -> bool:
        return self.passed is False


class IntegrityVerdict(BaseModel):
    """Every check of one candidate; flagged when any check failed."""

    checks: list[IntegrityCheck] = Field(default_factory=list)

    @property
    def flagged(self) -> list[IntegrityCheck]:
        return [c for c in self.checks if c.flagged]

    def text(self) -> str:
        """One line: 'integrity: 6 checks clean' or the flagged checks and why."""
        if not self.flagged:
            ran = sum(1 for c in self.checks if c.passed is not None)
            return f"integrity: {ran} check(s) clean"
        return "integrity FLAGGED: " + "; ".join(f"{c.name}: {c.detail}" for c in self.flagged)


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
