"""Generic loaders and prompt builders named by benchmark YAML files.

``local_files`` reads a user's JSONL/CSV/JSON files (paths relative to the YAML file);
``hub_files`` reads the files of a Hugging Face dataset snapshot; ``zero_shot`` and ``fixed_shots``
build the chat turns of the prompt. Family-specific ones live with their family
(:mod:`ftagent.benchmarks.demo`, :mod:`~ftagent.benchmarks.knowledge`, :mod:`~ftagent.benchmarks.domain_adapters`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ftagent.benchmarks.base import SOURCE_KEY, hub_snapshot, read_table
from ftagent.core.errors import UserInputError

if TYPE_CHECKING:
    from ftagent.benchmarks.adapter import Benchmark

Rows = list[dict[str, Any]]
LOCAL_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")


def _local_rows(bench: Benchmark, name: str) -> Rows:
    cfg = bench.config
    path = cfg.resolve(name)
    where = f"benchmark file {cfg.source_file}" if cfg.source_file else f"benchmark '{cfg.name}'"
    if not path.is_file():
        raise UserInputError(f"{where}: data file {path} not found (paths are relative to the YAML file)")
    if path.suffix.lower() not in LOCAL_SUFFIXES:
        raise UserInputError(f"{where}: data file {path}: use .jsonl, .csv, .json or .parquet")
    try:
        rows = read_table(path)
    except (ValueError, UnicodeDecodeError) as exc:  # json.JSONDecodeError is a ValueError
        raise UserInputError(f"{where}: cannot read {path}: {exc}") from exc
    if not rows:
        raise UserInputError(f"{where}: data file {path} holds no rows")
    rows = [{**r, SOURCE_KEY: f"{path}, row {i + 1}"} if isinstance(r, dict) else r for i, r in enumerate(rows)]
    needed = [c for c in cfg.columns() if not cfg.data.fields] + [cfg.answer]
    for i, row in enumerate(rows):
        missing = [c for c in dict.fromkeys(needed) if not isinstance(row, dict) or c not in row]
        if missing:
            raise UserInputError(f"{where}: row {i + 1} of {path.name} has no field {', '.join(map(repr, missing))} "
                                 f"(the prompt needs {cfg.columns()}, the gold field is `answer: {cfg.answer}`)")
    return rows


def local_files(bench: Benchmark, root: Path) -> dict[str, Any]:
    """``data.file`` (split by the standard rule) or ``data.validation`` + ``data.test`` (as given)."""
    data = bench.config.data
    if data.file is not None:
        return {"default": _local_rows(bench, data.file)}
    return {"default": {"validation": _local_rows(bench, data.validation or ""),
                        "test": _local_rows(bench, data.test or "")}}


TRAIN_NAME = re.compile(r"(^|[^a-z])(train|training|dev)([^a-z]|$)", re.IGNORECASE)


def tagged_rows(path: Path) -> Rows:
    """Rows of ``path``, each noting its origin (``SOURCE_KEY``) for error messages."""
    return [{**row, SOURCE_KEY: f"{path}, row {i + 1}"} if isinstance(row, dict) else row
            for i, row in enumerate(read_table(path))]


def rows_from(folder: Path, patterns: list[str], max_files: int | None = None) -> Rows:
    """Rows of the files matching the first pattern that matches anything (sorted, recursive).

    Raises:
        UserInputError: a matched file is a training split (``train``/``dev`` in its name): a benchmark
            is evaluated on its test files only.
    """
    for pattern in patterns:
        paths = sorted(p for p in folder.rglob(pattern) if p.is_file()
                       and not any(part.startswith(".") for part in p.relative_to(folder).parts))[:max_files]
        train = [p for p in paths if any(TRAIN_NAME.search(part) for part in p.relative_to(folder).parts)]
        if train:
            raise UserInputError(f"benchmark data under {folder}: pattern {pattern!r} matches the training "
                                 f"file {train[0].relative_to(folder)}; a benchmark reads its test files only "
                                 "(narrow `data.patterns`)")
        rows = [r for p in paths for r in tagged_rows(p)]
        if rows:
            return rows
    return []


def hub_files(bench: Benchmark, root: Path) -> dict[str, Rows]:
    """``data.repo`` downloaded into ``<root>/<key>/raw`` (once); rows of the ``data.patterns`` files.

    Raises:
        UserInputError: no rows in the files the patterns match.
    """
    data = bench.config.data
    raw = hub_snapshot(data.repo or "", bench.raw_dir(root), data.allow_patterns, gated=data.gated)
    patterns = data.patterns or ["*.jsonl", "*.parquet", "*.json"]
    rows = rows_from(raw, patterns, data.max_files)
    if not rows:
        raise UserInputError(f"benchmark '{bench.key}': no rows in the files under {raw} matching "
                             f"{', '.join(patterns)} (an empty or incomplete copy: delete the folder to download "
                             "it again)")
    return {"default": rows}


def fill(template: str, values: dict[str, Any]) -> str:
    """``template`` with each ``{column}`` replaced by its value (other braces left alone)."""
    for key, value in values.items():
        template = template.replace("{" + key + "}", str(value))
    return template


def zero_shot(bench: Benchmark, root: Path | None, subset: str) -> list[dict[str, str]]:
    """One HUMAN turn: the prompt template."""
    return [{"role": "HUMAN", "prompt": bench.config.prompt}]


def fixed_shots(bench: Benchmark, root: Path | None, subset: str) -> list[dict[str, str]]:
    """The YAML's ``shots`` (``{question, answer}`` each) as HUMAN/BOT turns, then the prompt."""
    turns: list[dict[str, str]] = []
    for shot in bench.config.shots:
        turns += [{"role": "HUMAN", "prompt": fill(bench.config.prompt, shot)},
                  {"role": "BOT", "prompt": str(shot.get("answer", "")) + "\n"}]
    return turns + zero_shot(bench, root, subset)
