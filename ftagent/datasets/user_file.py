"""Your own training data without code: ``--dataset ./my_data.jsonl`` (``.json`` list, ``.csv``, ``.parquet``).

A file given as ``--dataset`` is read strictly (its suffix says the format), its layout detected --
Alpaca (``instruction`` / ``input`` / ``output``, optional ``system``, ``history``) or ShareGPT
(``conversations`` or ``messages`` holding ``from``/``value`` or ``role``/``content`` turns) -- and every
row checked (a conversation that does not end on an assistant turn; rows with an empty or non-text
question or answer are raw data the data script drops, counted in the make-up the planner reads,
:mod:`.makeup`; a file without one usable row is refused). Bad files raise :class:`UserInputError` naming the file and the first bad row, before anything is
copied. A good file is copied (never linked: the session must not change when the original does)
into ``FT_FILE_PATH/datasets/<name>/`` with:

* ``.user_dataset.json`` -- :class:`UserDataset` (origin, sha256, format, column/tag mapping);
* ``dataset_info.json`` -- the LLaMA-Factory registration of the copy (``formatting: sharegpt`` with
  its ``columns``/``tags`` for ShareGPT), so LLaMA-Factory can read the folder as it is;
* ``FTAGENT_NOTES.md`` -- what the planner is told; ``.prepared`` -- so preparation returns at once.

The name comes from the file's stem (``my_data``; ``user_<stem>`` when a built-in dataset has that
name). The same content again reuses the copy; a changed file under a name already taken gets a new
copy named ``<stem>_<sha8>`` (a resumed session keeps training on the copy it started with).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import shutil
import time
from pathlib import Path
from typing import Any

from filelock import FileLock
from pydantic import BaseModel, Field

from ftagent.core.errors import UserInputError
from ftagent.datasets.base import DatasetSpec, FunctionSource

INFO_FILE = ".user_dataset.json"
LF_INFO_FILE = "dataset_info.json"
NOTES_FILE = "FTAGENT_NOTES.md"
SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")
ALPACA_COLUMNS = ("instruction", "input", "output", "system", "history")
MESSAGE_COLUMNS = ("conversations", "messages")
TAG_PAIRS = (("from", "value"), ("role", "content"))
USER_ROLES = ("human", "user")
ASSISTANT_ROLES = ("gpt", "assistant")
SYSTEM_ROLE = "system"
LICENSE = "your own file"
_CREATED: set[str] = set()  # copies this process made (a contaminated one is removed again)
EXPECTED = ("Alpaca columns `instruction`, `output` (optional `input`, `system`, `history`), or ShareGPT "
            "`conversations` / `messages`: a list of turns with `from`/`value` or `role`/`content`")


class UserDataset(BaseModel):
    """A registered user file (``.user_dataset.json`` in its dataset folder)."""

    name: str = Field(description="the dataset name the session uses")
    source_path: str = Field(description="the file the user passed (absolute)")
    file_name: str = Field(description="the copy's name inside the dataset folder")
    sha256: str
    format: str = Field(description="'alpaca' or 'sharegpt'")
    columns: list[str] = Field(default_factory=list, description="every column found in the file")
    messages: str | None = Field(None, description="ShareGPT: the column holding the turns")
    role_tag: str | None = None
    content_tag: str | None = None
    user_tag: str | None = None
    assistant_tag: str | None = None
    rows: int = 0
    usable_rows: int | None = Field(None, description="rows with a text instruction and answer (None: not counted)")
    registered_at: float = 0.0
    reused: bool = Field(False, exclude=True, description="this call found the copy already there")
    scan: str = Field("", exclude=True, description="the contamination scan's result, said at start-up")

    def describe(self) -> str:
        """One line: which format was detected, how many rows, where the copy is."""
        if self.format == "sharegpt":
            layout = (f"ShareGPT (`{self.messages}` turns with `{self.role_tag}`/`{self.content_tag}`, "
                      f"{self.user_tag}/{self.assistant_tag})")
        else:
            layout = "Alpaca (" + ", ".join(f"`{c}`" for c in ALPACA_COLUMNS if c in self.columns) + ")"
        extra = sorted(set(self.columns) - set(ALPACA_COLUMNS) - {self.messages})
        ignored = f"; columns ignored: {', '.join(extra)}" if extra else ""
        how = "reused the copy" if self.reused else "copied"
        usable = (f" ({self.usable_rows:,} usable: the others have an empty or non-text question or answer)"
                  if self.usable_rows is not None and self.usable_rows < self.rows else "")
        return (f"dataset `{self.name}` from {Path(self.source_path).name}: {layout} detected, {self.rows:,} rows"
                f"{usable}{ignored}; {how} under FT_FILE_PATH/datasets/{self.name}/"
                + (f"; {self.scan}" if self.scan else ""))


def looks_like_file(choice: str | None) -> bool:
    """True when ``--dataset`` names a file (a data suffix, a path separator, or an existing file)."""
    if not choice or choice == "all":
        return False
    return choice.lower().endswith(SUFFIXES) or "/" in choice or Path(choice).expanduser().is_file()


# ---------------------------------------------------------------------------------------------- reading

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


# -------------------------------------------------------------------------------------------- detection

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


# ------------------------------------------------------------------------------------ the converter

def to_alpaca(dataset_dir, limit=None, seed=0, keep_all=False):
    """A registered user file → Alpaca rows (``system``/``history`` kept where the file has them).

    ShareGPT: the last user turn is the instruction, the last answer the output, earlier turn pairs the
    history, a leading system turn (or a ``system`` column) the system prompt. Rows without a text
    instruction and answer are dropped (``keep_all=True`` keeps every row, as text). ``seed=None`` keeps
    the file's order (the contamination scan names rows by their index in the file).
    """
    import csv
    import json
    import random
    from pathlib import Path

    root = Path(dataset_dir)
    info = json.loads((root / ".user_dataset.json").read_text(encoding="utf-8"))
    path = root / info["file_name"]
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pandas as pd

        records = json.loads(pd.read_parquet(path).to_json(orient="records", force_ascii=False))
    elif suffix == ".csv":
        with path.open(encoding="utf-8-sig", newline="") as fh:
            records = list(csv.DictReader(fh))
    else:
        text = path.read_text(encoding="utf-8-sig")
        records = [json.loads(x) for x in text.splitlines() if x.strip()] if suffix == ".jsonl" else json.loads(text)
    rows = []
    for rec in records:
        if info["format"] == "alpaca":
            row = {"instruction": rec.get("instruction") or "", "input": rec.get("input") or "",
                   "output": rec.get("output") or ""}
            system, history = rec.get("system") or "", rec.get("history") or []
        else:
            role, content = info["role_tag"], info["content_tag"]
            turns = list(rec.get(info["messages"]) or [])
            system = rec.get("system") or ""
            if turns and turns[0].get(role) == "system":
                system = turns.pop(0).get(content) or system
            pairs = [[turns[k].get(content) or "", turns[k + 1].get(content) or ""]
                     for k in range(0, len(turns) - 1, 2)]
            row = {"instruction": pairs[-1][0], "input": "", "output": pairs[-1][1]}
            history = pairs[:-1]
        usable = all(isinstance(row[k], str) and row[k].strip() for k in ("instruction", "output"))
        if not usable and not keep_all:
            continue  # an empty or non-text question or answer: nothing to train on
        row = {k: v if isinstance(v, str) else json.dumps(v) for k, v in row.items()}
        if system:
            row["system"] = system
        if history:
            row["history"] = history
        rows.append(row)
    if seed is not None:
        random.Random(seed).shuffle(rows)
    return rows if limit is None else rows[:limit]


# ---------------------------------------------------------------------------------------- registering

def register_user_file(path: Path, datasets_root: Path, reserved: set[str] | frozenset[str] = frozenset(),
                       items: dict[str, Any] | None = None) -> UserDataset:
    """Check ``path``, copy it into ``datasets_root/<name>/`` (or reuse the copy) and register it.

    Args:
        path: the user's file.
        datasets_root: ``FT_FILE_PATH/datasets``.
        reserved: names the copy must not take (the built-in datasets).
        items: the benchmark's validation and test items, when known before anything is written (a
            local-file benchmark): the file is scanned against them first (issue 34.12).

    Raises:
        UserInputError: a bad file (see :func:`read_records`, :func:`detect_layout`) or, with ``items``,
            one holding benchmark items; nothing is copied or locked then.
    """
    path = Path(path).expanduser().absolute()
    records = read_records(path)
    layout = detect_layout(path, records)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    scan = "" if items is None else scan_before_copy(path, len(records), layout, items)
    root = Path(datasets_root)
    root.mkdir(parents=True, exist_ok=True)
    for name in candidate_names(path, digest, reserved):
        with FileLock(str(root / f".{name}.lock"), timeout=600):
            found = read_info(root / name)
            if found is not None and found.sha256 == digest:
                found.reused, found.scan = True, scan
                register_source(found)
                return found
            if (root / name).exists():
                continue  # taken by another file (or a folder placed by hand): next name
            info = UserDataset(name=name, source_path=str(path), file_name=_copy_name(path), sha256=digest,
                               rows=len(records), registered_at=time.time(), scan=scan, **layout.model_dump())
            _write_folder(path, root / name, info, records if layout.format == "alpaca" else None)
            _CREATED.add(name)
            register_source(info)
            return info
    raise UserInputError(f"--dataset {path}: every name for this file is taken under {root}")  # unreachable


def scan_before_copy(path: Path, rows: int, layout: Layout, items: dict[str, Any]) -> str:
    """:func:`check_against_benchmark` on the user's file where it is, before any copy, lock or registration.

    The converter reads a dataset folder (its code is shown to the planner as it is), so it is given a
    throw-away one in the system's temp folder: the description and a link to the file -- nothing is
    written under ``FT_FILE_PATH``. Returns the scan's line; raises UserInputError as the scan does.
    """
    import tempfile

    info = UserDataset(name=path.stem, source_path=str(path), file_name=_copy_name(path), sha256="", rows=rows,
                       **layout.model_dump())
    with tempfile.TemporaryDirectory(prefix="ftagent-scan-") as tmp:
        (Path(tmp) / INFO_FILE).write_text(info.model_dump_json(), encoding="utf-8")
        (Path(tmp) / info.file_name).symlink_to(path)
        check_against_benchmark(info, Path(tmp), items)  # not one of _CREATED: nothing to remove
    return info.scan


def candidate_names(path: Path, digest: str, reserved: set[str] | frozenset[str]) -> list[str]:
    """``<stem>`` (``user_<stem>`` if reserved), then ``<that>_<sha8>`` for a changed file."""
    stem = re.sub(r"[^a-z0-9]+", "_", path.stem.lower()).strip("_") or "data"
    base = f"user_{stem}" if stem in reserved or stem == "all" else stem
    return [base, f"{base}_{digest[:8]}"]


def _copy_name(path: Path) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", path.name)
    return name if not name.startswith(".") and name != LF_INFO_FILE else "data" + path.suffix.lower()


def read_info(folder: Path) -> UserDataset | None:
    """The :class:`UserDataset` of a dataset folder, or None when it is not a user file's copy."""
    try:
        return UserDataset.model_validate_json((Path(folder) / INFO_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _write_folder(path: Path, out: Path, info: UserDataset, alpaca: list[dict[str, Any]] | None) -> None:
    """Stage the copy and its files next to ``out``, then move the folder into place. ``alpaca``: the
    file's rows when they are Alpaca already (a ShareGPT file is profiled through its converter)."""
    from ftagent.datasets.makeup import profile_rows
    from ftagent.datasets.prepare import MARKER, PreparedMarker

    staging = out.with_name(f".{out.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    shutil.copyfile(path, staging / info.file_name)
    (staging / INFO_FILE).write_text(info.model_dump_json(indent=2), encoding="utf-8")
    makeup = profile_rows(alpaca if alpaca is not None else to_alpaca(staging, None, None, keep_all=True))
    info.usable_rows = makeup.usable
    (staging / INFO_FILE).write_text(info.model_dump_json(indent=2), encoding="utf-8")
    (staging / LF_INFO_FILE).write_text(json.dumps(llamafactory_entry(info), indent=2), encoding="utf-8")
    (staging / NOTES_FILE).write_text(notes(info, makeup.to_markdown()), encoding="utf-8")
    marker = PreparedMarker(name=info.name, repo_id=None, source="user", prepared_at=info.registered_at)
    (staging / MARKER).write_text(marker.model_dump_json(indent=2), encoding="utf-8")
    staging.replace(out)


def llamafactory_entry(info: UserDataset) -> dict[str, Any]:
    """The copy's LLaMA-Factory ``dataset_info.json`` (``dataset_dir`` = the dataset folder)."""
    if info.format == "alpaca":
        columns = {"prompt": "instruction", "response": "output"}
        columns.update({lf: col for lf, col in (("query", "input"), ("system", "system"), ("history", "history"))
                        if col in info.columns})
        return {info.name: {"file_name": info.file_name, "formatting": "alpaca", "columns": columns}}
    turns: dict[str, str | None] = {"messages": info.messages}
    if "system" in info.columns:
        turns["system"] = "system"
    tags = {"role_tag": info.role_tag, "content_tag": info.content_tag, "user_tag": info.user_tag,
            "assistant_tag": info.assistant_tag, "system_tag": SYSTEM_ROLE}
    return {info.name: {"file_name": info.file_name, "formatting": "sharegpt", "columns": turns, "tags": tags}}


def notes(info: UserDataset, makeup: str = "") -> str:
    """``FTAGENT_NOTES.md``: what the planner reads about the file (its make-up first: the catalogue
    shows only the start of these notes)."""
    convert = ("rows are Alpaca already" if info.format == "alpaca" else
               "each conversation becomes one Alpaca row: the last user turn → `instruction`, the last answer "
               "→ `output`, earlier turn pairs → `history`, a system turn → `system`")
    return (f"# {info.name}: the user's own training file\n\n"
            f"- {info.describe()}\n"
            f"- The user chose this file for the session: it is raw data for the task -- check its make-up "
            "below, keep the rows that fit the benchmark, and write them in the benchmark's format.\n"
            + (f"\n{makeup}\n\n" if makeup else "")
            + f"- Default converter (`ftagent datasets show {info.name} --code`): {convert}; it reads "
            f"`{INFO_FILE}` and `{info.file_name}` in this folder and drops rows without a text question and "
            "answer.\n"
            f"- `dataset_info.json` here registers `{info.file_name}` for LLaMA-Factory as it is.\n")


def user_source(info: UserDataset) -> FunctionSource:
    """The registry entry of a user file: its spec, the generic converter and its notes."""
    spec = DatasetSpec(name=info.name, repo_id=None, related_benchmarks=[], license=LICENSE,
                       task_type=f"user file ({info.format})",
                       summary=f"{info.rows:,} rows from {Path(info.source_path).name} ({info.format})")
    return FunctionSource(spec=spec, converter=to_alpaca, generator=_no_regeneration)


def _no_regeneration(dataset_dir: Path) -> None:
    raise UserInputError(f"{Path(dataset_dir).name} is a copy of your own file: pass the file again as "
                         "--dataset FILE to register it anew")


def register_source(info: UserDataset) -> None:
    """Make ``info.name`` a dataset of this process (lookups, converter source, notes)."""
    from ftagent.datasets.registry import register_user_source

    register_user_source(info.name, user_source(info))


def register_existing(datasets_root: Path) -> list[str]:
    """Register every user file's copy under ``datasets_root`` (a resumed session's dataset among them)."""
    root = Path(datasets_root)
    names = []
    for info_path in sorted(root.glob(f"*/{INFO_FILE}")) if root.is_dir() else []:
        info = read_info(info_path.parent)
        if info is not None and info.name == info_path.parent.name:
            register_source(info)
            names.append(info.name)
    return names


def check_against_benchmark(info: UserDataset, folder: Path, items: dict[str, Any]) -> int:
    """The contamination scan of the built-in datasets' generated rows, on the whole user file.

    Returns the rows checked. Raises UserInputError naming how many rows hold benchmark items and the
    first row's index and item id -- never the item's text (the test split stays hidden). A copy this
    process made is removed then (the fixed file takes the name again); an older one stays, as a
    session may have trained on it.
    """
    from ftagent.core.errors import StepError
    from ftagent.datasets.contamination import check_contamination

    rows = to_alpaca(folder, None, None, keep_all=True)
    if not items:
        info.scan = "no benchmark items to scan it against"
        return len(rows)
    try:
        check_contamination(rows, items, examples=1)
        info.scan = f"contamination scan: none of its {len(rows):,} rows holds one of {len(items):,} benchmark items"
    except StepError as exc:
        if info.name in _CREATED:
            shutil.rmtree(folder, ignore_errors=True)
            _CREATED.discard(info.name)
        first = (exc.details or {}).get("examples", [{}])[0]
        raise UserInputError(
            f"--dataset {info.source_path}: {exc.details.get('flagged_rows')} of {len(rows)} rows contain items of "
            f"the benchmark's validation or test split (first: row {first.get('row_index')}, counted from 0, holds "
            f"benchmark item {first.get('item_id')}); remove them -- training on evaluation items makes the score "
            "meaningless") from exc
    return len(rows)
