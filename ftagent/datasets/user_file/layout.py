"""Profiling a user's rows: Alpaca (``instruction`` / ``input`` / ``output``, optional ``system``, ``history``) or
ShareGPT (``conversations`` or ``messages`` holding ``from``/``value`` or ``role``/``content`` turns), detected
from the columns, and every row checked against it. Rows with an empty or non-text question or answer are
raw data the data script drops (counted for the planner, :mod:`ftagent.datasets.makeup`); a wrong column, a
conversation that does not alternate or end on an answer, or a file without one usable row is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ftagent.core.errors import UserInputError

ALPACA_COLUMNS = ("instruction", "input", "output", "system", "history")
MESSAGE_COLUMNS = ("conversations", "messages")
TAG_PAIRS = (("from", "value"), ("role", "content"))
USER_ROLES = ("human", "user")
ASSISTANT_ROLES = ("gpt", "assistant")
SYSTEM_ROLE = "system"
EXPECTED = ("Alpaca columns `instruction`, `output` (optional `input`, `system`, `history`), or ShareGPT "
            "`conversations` / `messages`: a list of turns with `from`/`value` or `role`/`content`")


class Layout(BaseModel):
    """What :func:`detect_layout` found."""

    format: str
    columns: list[str]
    messages: str | None = None
    role_tag: str | None = None
    content_tag: str | None = None
    user_tag: str | None = None
    assistant_tag: str | None = None


def detect_layout(path: Path, records: list[dict[str, Any]]) -> Layout:
    """Alpaca or ShareGPT, from the columns; every row is checked against that layout.

    Raises:
        UserInputError: neither layout (naming the columns found and the ones expected), or the first
            bad row (empty instruction/output, a conversation without a final assistant answer ...).
    """
    columns = sorted({key for row in records for key in row})
    messages = next((c for c in MESSAGE_COLUMNS if c in columns), None)
    if messages is not None:
        return _detect_sharegpt(path, records, columns, messages)
    if "instruction" in columns and "output" in columns:
        _check_alpaca(path, records)
        return Layout(format="alpaca", columns=columns)
    raise UserInputError(f"--dataset {path}: unknown columns: found {', '.join(columns) or '(none)'}; "
                         f"expected {EXPECTED}")


def _usable(row: dict[str, Any], key: str) -> bool:
    return isinstance(row.get(key), str) and bool(row[key].strip())


def _check_alpaca(path: Path, records: list[dict[str, Any]]) -> None:
    """A raw file is what the data script cleans (issue 35): rows with an empty, missing or non-text
    instruction or output are accepted and counted for the planner (:mod:`.makeup`); only a file
    without one usable row is refused."""
    if not any(_usable(row, "instruction") and _usable(row, "output") for row in records):
        key = "instruction" if not any(_usable(row, "instruction") for row in records) else "output"
        bad = [i for i, row in enumerate(records) if not _usable(row, key)]
        raise UserInputError(f"--dataset {path}: no row has both a text `instruction` and `output`: {len(bad)} "
                             f"row(s) have an empty or missing `{key}` (first: row {bad[0]}, counted from 0)")
    _check_text_columns(path, records, ("input", "system"))
    for i, row in enumerate(records):
        history = row.get("history")
        if history not in (None, "") and not (isinstance(history, list) and all(
                isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in history)):
            raise UserInputError(f"--dataset {path}: row {i}: `history` must be a list of [instruction, answer] "
                                 "pairs")


def _check_text_columns(path: Path, records: list[dict[str, Any]], keys: tuple[str, ...]) -> None:
    """Columns every row's prompt is built from must be text where present: a non-text one (a number, an
    object) is no anomaly the data script cleans row by row but a wrong column, and each training run
    failed on it (issue 34.6: a non-text ``system`` was accepted, then every micro-batch failed)."""
    for key in keys:
        bad = [i for i, row in enumerate(records) if row.get(key) is not None and not isinstance(row[key], str)]
        if bad:
            raise UserInputError(f"--dataset {path}: `{key}` must be text (or left out): {len(bad)} row(s) hold "
                                 f"{type(records[bad[0]][key]).__name__} (first: row {bad[0]}, counted from 0)")


def _detect_sharegpt(path: Path, records: list[dict[str, Any]], columns: list[str], messages: str) -> Layout:
    _check_text_columns(path, records, ("system",))
    for i, row in enumerate(records):
        if not isinstance(row.get(messages), list) or not row[messages]:
            raise UserInputError(f"--dataset {path}: row {i}: `{messages}` is not a non-empty list of turns")
    first = next((t for row in records for t in (row.get(messages) or []) if isinstance(t, dict)), {})
    tags = next(((r, c) for r, c in TAG_PAIRS if r in first and c in first), None)
    if tags is None:
        raise UserInputError(f"--dataset {path}: the turns in `{messages}` have keys {sorted(first) or '(none)'}; "
                             "expected `from`/`value` or `role`/`content`")
    role, content = tags
    seen: dict[str, set[str]] = {"user": set(), "assistant": set()}
    empty = []
    for i, row in enumerate(records):
        if not _check_conversation(path, i, row[messages], role, content, seen):
            empty.append(i)
    if len(empty) == len(records):  # some empty last turns are the data script's to drop; all is no data
        raise UserInputError(f"--dataset {path}: row {empty[0]}: the last user turn or the last answer is empty "
                             "(in every row)")
    for kind, values in seen.items():
        if len(values) > 1:
            raise UserInputError(f"--dataset {path}: the {kind} turns are tagged both {' and '.join(sorted(values))}; "
                                 "use one tag throughout the file")
    return Layout(format="sharegpt", columns=columns, messages=messages, role_tag=role, content_tag=content,
                  user_tag=seen["user"].pop(), assistant_tag=seen["assistant"].pop())


def _check_conversation(path: Path, i: int, turns: list, role: str, content: str,
                        seen: dict[str, set[str]]) -> bool:
    """One row's turns: optional system first, then user/assistant alternating; False when the last
    question or answer is empty (a row the data script drops)."""
    where = f"--dataset {path}: row {i}"
    if any(not isinstance(t, dict) or not isinstance(t.get(content), str) for t in turns):
        raise UserInputError(f"{where}: every turn must be an object with a text `{content}`")
    body = turns[1:] if turns[0].get(role) == SYSTEM_ROLE else turns
    for j, turn in enumerate(body):
        kind, allowed = ("user", USER_ROLES) if j % 2 == 0 else ("assistant", ASSISTANT_ROLES)
        if turn.get(role) not in allowed:
            raise UserInputError(f"{where}: turn {j} has {role}={turn.get(role)!r}; expected a {kind} turn "
                                 f"({' or '.join(allowed)}) -- turns alternate user/assistant after an optional "
                                 "system turn")
        seen[kind].add(turn[role])
    if len(body) < 2 or len(body) % 2:
        raise UserInputError(f"{where}: the conversation does not end with an assistant answer")
    return bool(body[-1][content].strip() and body[-2][content].strip())
