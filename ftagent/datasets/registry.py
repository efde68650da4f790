"""The dataset registry: name → :class:`~ftagent.datasets.base.DatasetSource` (lazy imports).

Plug-ins add entries through the entry-point group ``ftagent.datasets``
(``mydata = "mypkg.data:SOURCE"``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ftagent.core.registry import Registry

if TYPE_CHECKING:
    from ftagent.datasets.base import DatasetSource

DATASETS: Registry[DatasetSource] = Registry("dataset", entry_point_group="ftagent.datasets")

for _name in ("deepscaler", "chemcot", "panorama", "financeiq", "tableinstruct", "bioprobench", "demo_add"):
    DATASETS.register(_name, f"ftagent.datasets.{_name}:SOURCE")

_USER: set[str] = set()  # copies of users' own files (ftagent.datasets.user_file), registered at run time


def get_source(name: str) -> DatasetSource:
    """The source registered as ``name`` (UserInputError with a did-you-mean when unknown)."""
    return DATASETS.get(name)


def dataset_names() -> list[str]:
    """The registered dataset names (built-in and plug-ins; users' own files are not among them)."""
    return [n for n in DATASETS.names() if n not in _USER]


def register_user_source(name: str, source: DatasetSource) -> None:
    """Register a user file's copy under ``name`` for this process (never chosen by 'all' or a benchmark)."""
    DATASETS.register(name, source)
    _USER.add(name)


def is_user_dataset(name: str) -> bool:
    """True when ``name`` is a user file's copy registered in this process."""
    return name in _USER


def datasets_for_benchmark(benchmark_key: str, related: list[str]) -> list[str]:
    """Names of the datasets whose ``related_benchmarks`` match ``benchmark_key``, then the registered
    ones the benchmark's YAML lists in ``related_datasets`` (how a user benchmark names its training data).

    ``related``: the resolved spec's ``related_datasets`` (a session's start-up has it; the CLI looks the
    benchmark up itself).
    """
    names = [n for n in dataset_names() if get_source(n).spec.relates_to(benchmark_key)]
    return names + [n for n in related if n in dataset_names() and n not in names]


def resolve_dataset_choice(dataset: str | None, benchmark_key: str | None, related: list[str]) -> list[str]:
    """Turn ``--dataset`` (a name, 'all', or None) and the benchmark into dataset names.

    None → the datasets related to the benchmark; 'all' → every registered dataset; a name → itself
    (validated, with a did-you-mean on typos; a user file's registered copy is a name too). ``related``:
    see :func:`datasets_for_benchmark`.
    """
    if dataset == "all":
        return dataset_names()
    if dataset:
        get_source(dataset)
        return [dataset]
    return datasets_for_benchmark(benchmark_key, related) if benchmark_key else []


