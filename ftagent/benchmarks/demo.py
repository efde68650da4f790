"""``demo_add``: the bundled, offline benchmark ("What is a + b?" for two-digit a, b; answer in \\boxed{}).

Items are generated deterministically from a seed: 200 distinct (a, b) pairs, split 100/100 by
:mod:`ftagent.benchmarks.splits`. :func:`demo_add_pairs` exposes the pairs so the training-data
generator can stay disjoint from the benchmark. Prompt, metric and facts: configs/benchmarks/demo_add.yaml.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

DEMO_SEED = 20240601
DEMO_N = 200
QUESTION = "What is {a} + {b}?"


def demo_add_items(seed: int = DEMO_SEED, n: int = DEMO_N) -> list[dict[str, Any]]:
    """``n`` distinct two-digit addition items ``{"question", "answer", "a", "b"}`` (deterministic)."""
    rng = random.Random(seed)
    seen: set[tuple[int, int]] = set()
    items: list[dict[str, Any]] = []
    while len(items) < n:
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        if (a, b) in seen:
            continue
        seen.add((a, b))
        items.append({"question": QUESTION.format(a=a, b=b), "answer": str(a + b), "a": a, "b": b})
    return items


def demo_add_pairs(seed: int = DEMO_SEED) -> set[tuple[int, int]]:
    """The (a, b) pairs used by the benchmark (validation and test): training data must avoid them."""
    return {(it["a"], it["b"]) for it in demo_add_items(seed)}


def load_rows(bench: Any, root: Path) -> dict[str, list[dict[str, Any]]]:
    """Loader ``demo_add`` (configs/benchmarks/demo_add.yaml): the generated items, one subset."""
    return {"default": demo_add_items()}
