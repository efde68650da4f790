"""The registered raw datasets as rows: ``ftagent datasets list [--json]`` and the MCP server's ``datasets`` tool."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel


class DatasetRow(BaseModel):
    """One registered dataset: where it comes from, whether it is prepared here, the benchmarks it serves."""

    name: str
    source: str  # the HF repo id, or "(generated locally)"
    prepared: bool
    related_benchmarks: list[str]


def related_datasets(benchmark: str) -> list[str]:
    """The benchmark's ``related_datasets`` (a key or a YAML file; an unknown one: exit 2, did-you-mean)."""
    from ftagent.benchmarks import open_benchmark

    return list(open_benchmark(benchmark)[1].spec.related_datasets)


def dataset_rows(file_path: Path, benchmark: str | None = None) -> list[DatasetRow]:
    """Every registered dataset (``benchmark``: only those related to it), prepared or not under ``file_path``.

    Raises:
        UserInputError: an unknown benchmark.
    """
    from ftagent.datasets.prepare import is_prepared
    from ftagent.datasets.registry import dataset_names, datasets_for_benchmark, get_source

    names = datasets_for_benchmark(benchmark, related_datasets(benchmark)) if benchmark else dataset_names()
    rows = []
    for name in names:
        spec = get_source(name).spec
        rows.append(DatasetRow(name=name, source=spec.repo_id or "(generated locally)",
                               prepared=is_prepared(name, file_path), related_benchmarks=list(spec.related_benchmarks)))
    return rows
