"""Validation/test split of a benchmark (sub-)dataset.

For a sub-dataset of N items, ``k = min(100, N // 2)``: validation = the first k items, test = the
last k items. The two never overlap; for odd N the middle item is unused. Unlike the reference
(rdagent-ft.md §13 item 13), N = 1 gives the single item to **validation** and leaves test empty
(the reference produced an empty validation and a full test). ``limit`` (``FT_BENCHMARK_LIMIT``)
caps both sides.
"""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")

MAX_SPLIT = 100


def split_sizes(n: int, limit: int | None = None, cap: int = MAX_SPLIT) -> tuple[int, int]:
    """Sizes ``(validation, test)`` for ``n`` items."""
    if n < 0:
        raise ValueError("n must be >= 0")
    if n == 1:
        k_val, k_test = 1, 0
    else:
        k_val = k_test = min(cap, n // 2)
    if limit is not None:
        k_val, k_test = min(k_val, limit), min(k_test, limit)
    return k_val, k_test


def split_ranges(n: int, limit: int | None = None) -> dict[str, tuple[int, int]]:
    """Half-open index ranges ``{"validation": (start, stop), "test": (start, stop)}``."""
    k_val, k_test = split_sizes(n, limit)
    return {"validation": (0, k_val), "test": (n - k_test, n)}


def split_items(items: list[T], limit: int | None = None) -> dict[str, list[T]]:
    """Split ``items`` into ``{"validation": [...], "test": [...]}`` by the rule above."""
    ranges = split_ranges(len(items), limit)
    return {name: items[a:b] for name, (a, b) in ranges.items()}


def split_subsets(subsets: dict[str, list[Any]], limit: int | None = None) -> dict[str, dict[str, list[Any]]]:
    """Apply :func:`split_items` to every sub-dataset: ``{subset: {split: items}}``."""
    return {name: split_items(rows, limit) for name, rows in subsets.items()}
