"""Benchmark adapters (light: adapters are imported on first use).

``get_benchmark(key)`` returns an adapter instance; ``benchmark_keys()`` lists keys;
``describe_all()`` / ``describe(key)`` feed ``ftagent benchmarks list|show``.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import TYPE_CHECKING

from ftagent.core.paths import config_file

if TYPE_CHECKING:
    from ftagent.benchmarks.base import BenchmarkAdapter

_SCENARIOS = config_file("scenarios.json")


@lru_cache(maxsize=1)
def _descriptions() -> dict:
    try:
        return json.loads(_SCENARIOS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def benchmark_keys() -> list[str]:
    """All registered benchmark keys (built-in and plug-ins), sorted."""
    from ftagent.benchmarks.registry import BENCHMARKS

    return BENCHMARKS.names()


def get_benchmark(key: str) -> BenchmarkAdapter:
    """The adapter for ``key`` (description filled from configs/scenarios.json when empty).

    Raises:
        UserInputError: unknown key (with a did-you-mean hint).
    """
    from ftagent.benchmarks.registry import BENCHMARKS

    target = BENCHMARKS.get(key)
    adapter = target() if isinstance(target, type) else target
    entry = _descriptions().get(key, {})
    if not adapter.spec.description and isinstance(entry, dict) and entry.get("benchmark_description"):
        adapter.spec = adapter.spec.model_copy(update={"description": entry["benchmark_description"]})
    return adapter


def describe_all() -> list[str]:
    """One line per key: key, category, core metric, direction."""
    return [get_benchmark(k).spec.describe_line() for k in benchmark_keys()]


def describe(key: str) -> str:
    """A multi-line description of one adapter."""
    spec = get_benchmark(key).spec
    rows = [
        ("key", spec.key), ("category", spec.category), ("core metric", f"{spec.core_metric} ({spec.direction})"),
        ("data source", spec.data_source), ("training datasets", ", ".join(spec.related_datasets) or "-"),
        ("sub-datasets", ", ".join(spec.subsets)), ("prompt", spec.prompt.replace("\n", "\\n")),
        ("answer rule", spec.answer_rule), ("evaluator", spec.evaluator), ("max_out_len", str(spec.max_out_len)),
        ("description", spec.description or "-"),
    ]
    return "\n".join(f"{name:<18} {value}" for name, value in rows)
