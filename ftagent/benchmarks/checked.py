"""A benchmark's items as start-up read and checked them, before anything is written: what its preparation
writes, so the files are read once and the rows the ``--dataset`` scan saw are the rows the session evaluates.

Only a benchmark whose data are files read where they are (``data.loader: local_files``) has them before it is
prepared (:class:`ChecksData`); a downloaded one is checked when it is prepared.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

Items = list[dict[str, Any]]


@dataclass(frozen=True)
class CheckedItems:
    """The items of every sub-dataset and split (``validation``, ``test``, ``full``) for ``limit``."""

    limit: int | None
    parts: Mapping[str, Mapping[str, Items]]  # sub-dataset → split → items, in the order they are written

    def split(self, split: str) -> Items:
        """One split's items, every sub-dataset's in order (what ``<key>/<split>.jsonl`` holds)."""
        return [item for rows in self.parts.values() for item in rows[split]]

    @cached_property
    def digest(self) -> str:
        """SHA-256 of the items: a prepared folder written from other rows (an edited file) is prepared again."""
        text = json.dumps(self.parts, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()


@runtime_checkable
class ChecksData(Protocol):
    """A benchmark that can read and check its items without writing, and be prepared from them."""

    def check_data(self, root: Path, limit: int | None = None) -> CheckedItems | None:
        """The items, read and checked (None: its data must be downloaded first, checked when prepared)."""
        ...

    def prepare(self, root: Path, *, limit: int | None = None, items: CheckedItems | None = None) -> Path:
        """Write ``root/<key>`` from ``items`` (None: read them now) and return it."""
        ...
