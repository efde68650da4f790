"""Validation/test split of a benchmark (sub-)dataset: a seeded shuffle, then per-stratum shares.

For a sub-dataset of N items, ``k = min(100, N // 2)`` items go to validation and ``k`` to test; the
two never overlap and, for ``N > 2k``, the rest is unused. Which items:

* the items are first shuffled with a fixed seed (:data:`SEED` = 42, numpy's ``default_rng``
  permutation, the generator behind ``datasets.Dataset.shuffle(seed=42)`` that the reference's
  loaders use), so a file sorted by label or subject (ChemCoTBench equivalence: 50 "Yes" then 50
  "No"; MMLU's ``all`` file: 57 subjects in alphabetical order) cannot make validation and test two
  different populations. Validation = the first ``k`` of the permutation, test = the last ``k``.
* with ``groups`` (one label per item, e.g. MMLU's ``subject``), ``k`` is shared out over the groups
  in proportion to their sizes (largest remainder, ties by group name), each group giving at most
  half of its items to each side; inside a group the items are taken from its own seeded
  permutation (first ``a`` → validation, last ``a`` → test). Both splits then hold every subject in
  the same proportion as the file.

Unlike the reference (rdagent-ft.md §13 item 13), N = 1 gives the single item to **validation** and
leaves test empty. ``limit`` (``FT_BENCHMARK_LIMIT``) caps both sides. :data:`SPLIT_VERSION` names
this rule: prepared benchmark folders and the evaluation cache carry it, so a folder or a cached
score made under another rule is never served.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

MAX_SPLIT = 100
SEED = 42
SPLIT_VERSION = "2"  # 1: first/last k rows as read; 2: seed-42 shuffle + per-stratum shares


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


def permutation(n: int, seed: int = SEED) -> list[int]:
    """The seeded order of ``range(n)`` (same as ``datasets.Dataset.shuffle(seed)`` on ``n`` rows)."""
    import numpy as np

    return [int(i) for i in np.random.default_rng(seed).permutation(n)]


def _shares(sizes: dict[Hashable, int], k: int) -> dict[Hashable, int]:
    """``k`` shared over groups in proportion to ``sizes``, at most ``size // 2`` each (largest remainder)."""
    total = sum(sizes.values())
    caps = {g: n // 2 for g, n in sizes.items()}
    k = min(k, sum(caps.values()))
    shares = {g: min(caps[g], k * n // total) for g, n in sizes.items()}
    while sum(shares.values()) < k:  # hand out the rest by largest remainder among groups with room
        room = [g for g in sizes if shares[g] < caps[g]]
        best = max(room, key=lambda g: (k * sizes[g] / total - shares[g], -sorted(sizes, key=str).index(g)))
        shares[best] += 1
    return shares


def split_indices(n: int, limit: int | None = None, groups: Sequence[Hashable] | None = None
                  ) -> dict[str, list[int]]:
    """Item indices ``{"validation": [...], "test": [...]}`` of ``n`` items by the rule above.

    Args:
        n: number of items.
        limit: cap of each side (``FT_BENCHMARK_LIMIT``).
        groups: one stratum label per item (``None`` = one stratum).

    Raises:
        ValueError: ``groups`` does not hold ``n`` labels.
    """
    k_val, k_test = split_sizes(n, limit)
    order = permutation(n)
    if groups is None or n < 2 or len(set(groups)) < 2:
        if groups is not None and len(groups) != n:
            raise ValueError(f"{len(groups)} group labels for {n} items")
        return {"validation": order[:k_val], "test": order[n - k_test:] if k_test else []}
    if len(groups) != n:
        raise ValueError(f"{len(groups)} group labels for {n} items")
    members: dict[Hashable, list[int]] = {}
    for i in order:  # each group's members in the global seeded order = the group's own permutation
        members.setdefault(groups[i], []).append(i)
    shares = _shares({g: len(m) for g, m in members.items()}, k_val)
    rank = {i: r for r, i in enumerate(order)}
    val = [i for g, m in members.items() for i in m[:shares[g]]]
    test = [i for g, m in members.items() for i in (m[len(m) - shares[g]:] if shares[g] else [])]
    return {"validation": sorted(val, key=rank.__getitem__), "test": sorted(test, key=rank.__getitem__)}


def split_items(items: list[T], limit: int | None = None, groups: Sequence[Hashable] | None = None
                ) -> dict[str, list[T]]:
    """Split ``items`` into ``{"validation": [...], "test": [...]}`` by the rule above."""
    return {name: [items[i] for i in idx] for name, idx in split_indices(len(items), limit, groups).items()}


def split_by_key(items: list[dict[str, Any]], key: str | None, limit: int | None = None
                 ) -> dict[str, list[dict[str, Any]]]:
    """:func:`split_items` stratified by the value of ``items[i][key]`` (``key=None``: not stratified)."""
    groups = [str(item.get(key, "")) for item in items] if key else None
    return split_items(items, limit, groups)


def final_indices(n: int, limit: int | None = None, groups: Sequence[Hashable] | None = None, *,
                  rest: bool = True) -> list[int]:
    """Item indices of the **final** evaluation (``FT_FINAL_EVAL=full``): every item outside validation.

    The test items first (in their split order), then, with ``rest``, the items in neither split in
    the seeded order; ``limit`` caps the whole list like each split, so under a limit it is the test
    split. ``rest=False`` (a benchmark whose unused rows are a training set: FinanceIQ) gives test only.
    Where ``n <= 2 * MAX_SPLIT`` there is no rest: the final set equals test.
    """
    parts = split_indices(n, limit, groups)
    taken = set(parts["validation"]) | set(parts["test"])
    extra = [i for i in permutation(n) if i not in taken] if rest else []
    if limit is not None:  # items the limit kept out of validation are not part of any run
        extra = [i for i in extra if i not in set(split_indices(n, None, groups)["validation"])]
    out = parts["test"] + extra
    return out[:limit] if limit is not None else out


def unused_indices(n: int, groups: Sequence[Hashable] | None = None) -> list[int]:
    """Indices (ascending) in neither split with no ``limit``: what a training copy may keep."""
    used = {i for idx in split_indices(n, None, groups).values() for i in idx}
    return [i for i in range(n) if i not in used]
