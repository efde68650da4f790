"""Reading a user's file strictly, as its suffix says (``.jsonl``, a ``.json`` list, ``.csv``, ``.parquet``):
the rows as JSON objects, or one :class:`UserInputError` naming the file and what is wrong with it."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from ftagent.core.errors import UserInputError

SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")


def looks_like_file(choice: str | None) -> bool:
    """True when ``--dataset`` names a file (a data suffix, a path separator, or an existing file)."""
    if not choice or choice == "all":
        return False
    return choice.lower().endswith(SUFFIXES) or "/" in choice or Path(choice).expanduser().is_file()


def read_records(path: Path) -> list[dict[str, Any]]:
    """The rows of ``path`` as its suffix says (.jsonl / .json list / .csv / .parquet), read strictly.

    Raises:
        UserInputError: missing, unsupported suffix, unreadable, not the format of its suffix, not
            UTF-8, not objects, or no rows.
    """
    path = Path(path)
    if not path.is_file():
        raise UserInputError(f"--dataset {path}: no such file")
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise UserInputError(f"--dataset {path}: unsupported file type '{suffix or '(none)'}'; "
                             f"use one of {', '.join(SUFFIXES)}")
    try:
        records = _read_parquet(path) if suffix == ".parquet" else _read_text(path, suffix, _decode(path))
    except OSError as exc:
        raise UserInputError(f"--dataset {path}: cannot read the file ({exc.strerror or exc})") from exc
    if not records:
        raise UserInputError(f"--dataset {path}: the file has no rows")
    return records


def _decode(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UserInputError(f"--dataset {path}: not valid UTF-8 (byte {exc.start}: {exc.reason}); "
                             "save it as UTF-8") from exc


def _read_text(path: Path, suffix: str, text: str) -> list[dict[str, Any]]:
    if suffix == ".jsonl":
        return _read_jsonl(path, text)
    if suffix == ".json":
        return _read_json(path, text)
    try:
        return [dict(row) for row in csv.DictReader(io.StringIO(text, newline=""), strict=True)]
    except csv.Error as exc:
        raise UserInputError(f"--dataset {path}: not a readable CSV file ({exc})") from exc


def _read_jsonl(path: Path, text: str) -> list[dict[str, Any]]:
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserInputError(f"--dataset {path}: line {number} is not JSON ({exc.msg}); a .jsonl file "
                                 "holds one JSON object per line") from exc
        if not isinstance(value, dict):
            raise UserInputError(f"--dataset {path}: line {number} is a JSON {type(value).__name__}, "
                                 "not an object")
        rows.append(value)
    return rows


def _read_json(path: Path, text: str) -> list[dict[str, Any]]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserInputError(f"--dataset {path}: not a JSON document ({exc.msg} at line {exc.lineno}); a .json "
                             "file holds one list of objects (one object per line: name it .jsonl)") from exc
    if not isinstance(value, list):
        raise UserInputError(f"--dataset {path}: the JSON document is a {type(value).__name__}; "
                             "expected a list of objects")
    for i, row in enumerate(value):
        if not isinstance(row, dict):
            raise UserInputError(f"--dataset {path}: row {i} is a JSON {type(row).__name__}, not an object")
    return value


def _read_parquet(path: Path) -> list[dict[str, Any]]:
    import pandas as pd

    try:
        frame = pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises ArrowInvalid/OSError/ValueError for a non-Parquet file
        reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise UserInputError(f"--dataset {path}: not a readable Parquet file ({reason})") from exc
    return json.loads(frame.to_json(orient="records", force_ascii=False))  # numpy values → JSON ones
