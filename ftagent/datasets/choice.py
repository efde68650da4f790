"""A ``--dataset`` value resolved at start-up: a registered dataset name, ``all`` or a user's own file (checked,
copied under ``FT_FILE_PATH/datasets/`` and registered: :mod:`ftagent.datasets.user_file`), and the scan of
the users' files against the benchmark's items once the benchmark is prepared.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from ftagent.benchmarks.base import BenchmarkSpec
    from ftagent.benchmarks.checked import CheckedItems


class DatasetChoice(NamedTuple):
    """What ``--dataset`` resolved to: ``name`` (a registered name or 'all'; a user file: its copy's name, the
    name the session trains on) and ``file`` (the user's own file behind it, kept for the record; None)."""

    name: str | None
    file: str | None = None


def choose_dataset(choice: str | None, spec: BenchmarkSpec, file_path: Path, *, check: bool,
                   checked: CheckedItems | None, limit: int | None) -> DatasetChoice:
    """Register the copies of users' files already under ``FT_FILE_PATH/datasets`` (a resumed session may
    train on one), then, with ``check``, check ``choice`` (:func:`check_dataset`): a file is scanned against
    the benchmark's items when they are known before anything is written (``checked``: a local-file
    benchmark's rows as start-up read them; else its prepared folder when current for ``limit``).

    Raises:
        UserInputError: an unknown name or a bad or contaminated file (nothing is copied then).
    """
    from ftagent.core.paths import benchmark_data_dir, datasets_dir
    from ftagent.datasets.user_file.reading import looks_like_file
    from ftagent.datasets.user_file.register import register_existing

    register_existing(datasets_dir(file_path))
    if not check:
        return DatasetChoice(choice)
    known = None
    if looks_like_file(choice):
        from ftagent.benchmarks.prepared import items_before_writing

        known = items_before_writing(spec.key, checked, list(spec.input_columns), spec.output_column,
                                     benchmark_data_dir(file_path, spec.key), limit)
    name = check_dataset(choice, spec.key, file_path, related=list(spec.related_datasets),
                         items=known[0] if known else None, answers=known[1] if known else None)
    if choice is not None and name != choice:  # a file: the session goes on with its registered copy
        return DatasetChoice(name, str(Path(choice).expanduser().absolute()))
    return DatasetChoice(choice)


def check_dataset(choice: str | None, benchmark: str, file_path: Path | None, related: list[str],
                  items: dict[str, list[str]] | None = None, answers: dict[str, str] | None = None) -> str | None:
    """``--dataset`` must be a registered dataset name, ``all`` or a data file; returns the name to use.

    A file (``./my_data.jsonl``, ``.json``, ``.csv``, ``.parquet``) is checked, copied under
    ``FT_FILE_PATH/datasets/`` and registered (:mod:`ftagent.datasets.user_file`): its copy's name is
    returned. Raises UserInputError for an unknown name or a bad file (nothing is copied then).
    ``related``: the benchmark spec's ``related_datasets``.
    ``items``: the benchmark's validation and test items when they are known before anything is written
    (a local-file benchmark): a file holding one is refused before it is copied (issue 34.12); ``answers``
    their gold answers (the scan's numeric match).
    """
    from ftagent.datasets.registry import dataset_names, resolve_dataset_choice
    from ftagent.datasets.user_file.reading import looks_like_file
    from ftagent.datasets.user_file.register import register_user_file

    if choice is not None and looks_like_file(choice):
        from ftagent.core.paths import datasets_dir

        root = datasets_dir(Path(file_path or ".").absolute())
        return register_user_file(Path(choice), root, reserved=set(dataset_names()), items=items,
                                  answers=answers or {}).name
    resolve_dataset_choice(choice, benchmark, related)
    return choice


def check_user_datasets(names: list[str], benchmark: str, file_path: Path, input_columns: list[str],
                        answer_column: str) -> list[str]:
    """Scan the user files among ``names`` against the benchmark's validation and test items.

    Runs once the benchmark data is prepared, still before the session exists (the scenario's prepare).
    Returns one line per user file (the detected format, rows, where the copy is) for the session's events.
    ``input_columns``, ``answer_column``: the resolved spec's.

    Raises:
        UserInputError: a file holds benchmark items (how many, the first row index and item id).
    """
    from ftagent.benchmarks.frozen import scan_answers, scan_items
    from ftagent.core.paths import benchmark_data_dir
    from ftagent.datasets.prepare import dataset_dir
    from ftagent.datasets.registry import is_user_dataset
    from ftagent.datasets.user_file.info import read_info
    from ftagent.datasets.user_file.register import check_against_benchmark

    lines: list[str] = []
    items: dict[str, list[str]] | None = None
    answers: dict[str, str] = {}
    for name in names:
        info = read_info(dataset_dir(name, file_path)) if is_user_dataset(name) else None
        if info is None:
            continue
        if items is None:  # read once, when some file is a user's
            items = scan_items(benchmark_data_dir(file_path, benchmark), input_columns)
            answers = scan_answers(benchmark_data_dir(file_path, benchmark), answer_column)
        check_against_benchmark(info, dataset_dir(name, file_path), items, answers)
        lines.append(info.describe())
    return lines
