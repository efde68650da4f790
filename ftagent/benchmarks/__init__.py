"""Benchmarks as data: one YAML file per benchmark (configs/benchmarks/), one registry.

Public API:

* ``get_benchmark(key_or_file)`` — the benchmark (``.spec`` + ``prepare``/``load_items``/``dataset_blocks``);
  a path ending in ``.yaml``/``.yml`` loads a user benchmark file and registers it under its ``name``.
* ``resolve_benchmark(key_or_file)`` — the key to use from then on (the file's ``name`` for a file).
* ``open_benchmark(key_or_file)`` — both, ``(key, benchmark)``, from one registry lookup (a session's
  start-up, :func:`ftagent.finetune.resolve.resolve_run`).
* ``benchmark_keys()``, ``benchmark_specs()``, ``describe_all()``, ``describe(key_or_file)`` — ``ftagent benchmarks
  list|show`` and the MCP server's ``benchmarks`` tool.
* ``default_description(key)`` — the description given to the planner when none is passed.

Everything is lazy: nothing is parsed until first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ftagent.benchmarks.base import BenchmarkAdapter, BenchmarkSpec

__all__ = ["benchmark_keys", "benchmark_specs", "default_description", "describe", "describe_all", "get_benchmark",
           "open_benchmark", "resolve_benchmark"]


def resolve_benchmark(key: str) -> str:
    """The registry key of ``key``: itself, or the ``name`` of a benchmark YAML file (registered now).

    Raises:
        UserInputError: unknown key (did-you-mean), or a bad or missing benchmark file.
    """
    from ftagent.benchmarks.registry import BENCHMARKS
    from ftagent.benchmarks.schema import is_benchmark_file

    if is_benchmark_file(key):
        return BENCHMARKS.register_file(key)
    BENCHMARKS.get(key)
    return key


def benchmark_keys() -> list[str]:
    """All registered benchmark keys (built-in, FT_BENCHMARK_PATHS files, plug-ins), sorted."""
    from ftagent.benchmarks.registry import BENCHMARKS

    return BENCHMARKS.names()


def open_benchmark(key: str) -> tuple[str, BenchmarkAdapter]:
    """``(registry key, benchmark)`` for a key or a benchmark YAML file (registered now), one lookup.

    Raises:
        UserInputError: unknown key (with a did-you-mean hint) or a bad benchmark file.
    """
    from ftagent.benchmarks.registry import BENCHMARKS
    from ftagent.benchmarks.schema import is_benchmark_file

    if is_benchmark_file(key):
        key = BENCHMARKS.register_file(key)
    target = BENCHMARKS.get(key)
    return key, target() if isinstance(target, type) else target


def get_benchmark(key: str) -> BenchmarkAdapter:
    """The benchmark for a key or a benchmark YAML file (``ftagent benchmarks list|show``, tests, tools:
    a session takes the one its start-up resolved).

    Raises:
        UserInputError: unknown key (with a did-you-mean hint) or a bad benchmark file.
    """
    return open_benchmark(key)[1]


def default_description(key: str) -> str:
    """The benchmark's ``description`` ('' when it has none)."""
    return get_benchmark(key).spec.description or ""


def benchmark_specs() -> list[BenchmarkSpec]:
    """Every registered benchmark's spec (``ftagent benchmarks list --json``, the MCP server's ``benchmarks``)."""
    return [get_benchmark(k).spec for k in benchmark_keys()]


def describe_all() -> list[str]:
    """One line per key: key, category, core metric, direction."""
    return [get_benchmark(k).spec.describe_line() for k in benchmark_keys()]


def describe(key: str) -> str:
    """A multi-line description of one benchmark."""
    from ftagent.benchmarks.registry import BENCHMARKS

    bench = get_benchmark(key)
    spec = bench.spec
    source = BENCHMARKS.source_file(spec.key)
    rows = [
        ("key", spec.key), ("category", spec.category), ("core metric", f"{spec.core_metric} ({spec.direction})"),
        ("data source", spec.data_source), ("training datasets", ", ".join(spec.related_datasets) or "-"),
        ("sub-datasets", ", ".join(spec.subsets)), ("prompt", spec.prompt.replace("\n", "\\n")),
        ("answer rule", spec.answer_rule), ("evaluator", spec.evaluator), ("max_out_len", str(spec.max_out_len)),
        ("defined in", str(source) if source else "code (plug-in)"),
        ("description", spec.description or "-"),
    ]
    return "\n".join(f"{name:<18} {value}" for name, value in rows)
