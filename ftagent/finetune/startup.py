"""One start-up for every command that names a benchmark and a base model.

``ftagent llm_finetune``, ``ftagent demo`` and ``ftagent prompts`` resolve their options here, in one
order, so they cannot drift apart (``prompts --benchmark ./my_bench.yaml`` once looked the file path up
as if it were a key): the benchmark (key or YAML file → registry key), the base model name, the
dataset choice and the benchmark description. Bad input raises :class:`UserInputError` (exit 2) before
anything is written.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from ftagent.core.errors import UserInputError


class ResolvedRun(BaseModel):
    """What the options resolved to; the settings' ``ft`` block is updated to match."""

    benchmark: str = Field(description="the registry key (a YAML file is registered under its `name`)")
    benchmark_file: str | None = Field(None, description="the user YAML file behind the key, kept for --path")
    base_model: str
    dataset: str | None = Field(None, description="a registered name or 'all' (a user file: its copy's name)")
    dataset_file: str | None = Field(None, description="the user's own file behind `dataset`, kept for the record")
    description: str = ""


def check_benchmark(key: str) -> str:
    """The registry key of ``key``: a known key, or a benchmark YAML file (registered under its ``name``).

    Raises:
        UserInputError: unknown key (listing valid keys, suggesting the closest) or a bad benchmark file.
    """
    from ftagent.benchmarks import resolve_benchmark

    return resolve_benchmark(key)


def benchmark_file(key: str) -> str | None:
    """The user YAML file behind ``key`` (None for built-in and plug-in benchmarks): kept for ``--path``."""
    from ftagent.benchmarks.registry import BENCHMARKS

    path = BENCHMARKS.source_file(key)
    return str(path) if path is not None and key not in BENCHMARKS.builtin_files() else None


def check_base_model(name: str | None, file_path: Path | None = None) -> None:
    """A base model must be given, and be builtin/<name>, a local folder or an HF repo id."""
    if not name or not name.strip():
        raise UserInputError(
            "no base model: pass --base-model (e.g. builtin/tiny-qwen2 or Qwen/Qwen2.5-7B-Instruct) "
            "or set FT_BASE_MODEL"
        )
    from ftagent.models.builtin import check_model_name

    check_model_name(name, file_path)


def check_dataset(choice: str | None, benchmark: str, file_path: Path | None = None) -> str | None:
    """``--dataset`` must be a registered dataset name, ``all`` or a data file; returns the name to use.

    A file (``./my_data.jsonl``, ``.json``, ``.csv``, ``.parquet``) is checked, copied under
    ``FT_FILE_PATH/datasets/`` and registered (:mod:`ftagent.datasets.user_file`): its copy's name is
    returned. Raises UserInputError for an unknown name or a bad file (nothing is copied then).
    """
    from ftagent.datasets.registry import dataset_names, resolve_dataset_choice
    from ftagent.datasets.user_file import looks_like_file, register_user_file

    if looks_like_file(choice):
        from ftagent.datasets.prepare import datasets_root

        root = datasets_root(Path(file_path or ".").absolute())
        return register_user_file(Path(choice), root, reserved=set(dataset_names())).name
    resolve_dataset_choice(choice, benchmark)
    return choice


def register_user_datasets(file_path: Path | None) -> list[str]:
    """Register the copies of users' files under ``FT_FILE_PATH/datasets`` (a resumed session's among them)."""
    from ftagent.datasets.prepare import datasets_root
    from ftagent.datasets.user_file import register_existing

    return register_existing(datasets_root(Path(file_path or ".").absolute()))


def resolve_run(settings, *, check_datasets: bool = True) -> ResolvedRun:
    """Check and resolve the benchmark, base model and dataset choice of ``settings`` (updated in place).

    Args:
        settings: the loaded settings; ``settings.ft.target_benchmark`` becomes the registry key and an
            empty ``benchmark_description`` the benchmark's own description.
        check_datasets: check ``--dataset`` (a resumed session keeps the choice it was started with).

    Raises:
        UserInputError: no or unknown benchmark, bad benchmark file, no or bad base model, unknown dataset
            or a bad dataset file.
    """
    ft = settings.ft
    if not ft.target_benchmark:
        raise UserInputError(
            "no benchmark: pass --benchmark KEY (see `ftagent benchmarks list`). ftagent needs a benchmark "
            "to measure progress; --user-target-scenario only adds a free-text goal to the prompts"
        )
    ft.target_benchmark = check_benchmark(ft.target_benchmark)
    check_base_model(ft.base_model, ft.file_path)
    register_user_datasets(ft.file_path)  # a resumed session may train on a user file's copy
    dataset_file = None
    if check_datasets:
        name = check_dataset(ft.dataset, ft.target_benchmark, ft.file_path)
        if name != ft.dataset:  # a file: the session goes on with its registered copy
            dataset_file, ft.dataset = str(Path(ft.dataset).expanduser().absolute()), name
    if not ft.benchmark_description:
        from ftagent.benchmarks import get_benchmark

        ft.benchmark_description = get_benchmark(ft.target_benchmark).spec.description
    return ResolvedRun(benchmark=ft.target_benchmark, benchmark_file=benchmark_file(ft.target_benchmark),
                       base_model=ft.base_model, dataset=ft.dataset, dataset_file=dataset_file,
                       description=ft.benchmark_description or "")


def check_user_datasets(names: list[str], benchmark: str, file_path: Path) -> list[str]:
    """Scan the user files among ``names`` against the benchmark's validation and test items.

    Runs once the benchmark data is prepared, still before the session exists. Returns one line per
    user file (the detected format, rows, where the copy is) for the session's events.

    Raises:
        UserInputError: a file holds benchmark items (how many, the first row index and item id).
    """
    from ftagent.datasets.prepare import dataset_dir
    from ftagent.datasets.registry import is_user_dataset
    from ftagent.datasets.user_file import check_against_benchmark, read_info
    from ftagent.tools.llamafactory.data_script import benchmark_items_for

    lines, items = [], None
    for name in names:
        info = read_info(dataset_dir(name, file_path)) if is_user_dataset(name) else None
        if info is None:
            continue
        items = benchmark_items_for(benchmark, file_path) if items is None else items
        check_against_benchmark(info, dataset_dir(name, file_path), items)
        lines.append(info.describe())
    return lines
