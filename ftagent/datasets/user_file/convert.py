"""The default converter of a registered user file: its rows as Alpaca rows. Its source is what the planner is
shown and what a data script may copy (``ftagent datasets show <name> --code``), so every function imports what
it needs inside itself and reads only its dataset folder (``.user_dataset.json`` and the copy).

One reader per file type (:data:`READERS`: JSON, JSON Lines, CSV, parquet) and one row builder per layout
(:data:`ROWS`: Alpaca; ShareGPT, where the last user turn is the instruction, the last answer the output, earlier
turn pairs the history and a leading system turn, or a ``system`` column, the system prompt). What the planner is
shown (:func:`converter_code`) is :func:`to_alpaca` with only this file's reader and row builder nested in it
(issue 43: a plain JSONL file's prompt carried every branch, ~2.6k characters of ShareGPT, CSV and parquet).
"""

from __future__ import annotations

import inspect
import textwrap


def read_json(path):
    """The records of a JSON file (a list of objects)."""
    import json

    return json.loads(path.read_text(encoding="utf-8-sig"))


def read_jsonl(path):
    """The records of a JSON Lines file (one object per line)."""
    import json

    return [json.loads(x) for x in path.read_text(encoding="utf-8-sig").splitlines() if x.strip()]


def read_csv(path):
    """The records of a CSV file with a header row."""
    import csv

    with path.open(encoding="utf-8-sig", newline="") as fh:
        return list(csv.DictReader(fh))


def read_parquet(path):
    """The records of a parquet file."""
    import json

    import pandas as pd

    return json.loads(pd.read_parquet(path).to_json(orient="records", force_ascii=False))


def alpaca_row(rec, info):
    """(row, system, history) of an Alpaca record."""
    row = {"instruction": rec.get("instruction") or "", "input": rec.get("input") or "",
           "output": rec.get("output") or ""}
    return row, rec.get("system") or "", rec.get("history") or []


def sharegpt_row(rec, info):
    """(row, system, history) of a ShareGPT record: the last turn pair is the row, earlier pairs the history."""
    role, content = info["role_tag"], info["content_tag"]
    turns = list(rec.get(info["messages"]) or [])
    system = rec.get("system") or ""
    if turns and turns[0].get(role) == "system":
        system = turns.pop(0).get(content) or system
    pairs = [[turns[k].get(content) or "", turns[k + 1].get(content) or ""] for k in range(0, len(turns) - 1, 2)]
    return {"instruction": pairs[-1][0], "input": "", "output": pairs[-1][1]}, system, pairs[:-1]


READERS = {".jsonl": read_jsonl, ".csv": read_csv, ".parquet": read_parquet}  # any other suffix: read_json
ROWS = {"alpaca": alpaca_row}  # any other format: sharegpt_row


def read_records(path):
    """The file's records, by its suffix."""
    return READERS.get(path.suffix.lower(), read_json)(path)


def to_row(rec, info):
    """(row, system, history) of one record, by the file's layout."""
    return ROWS.get(info["format"], sharegpt_row)(rec, info)


def to_alpaca(dataset_dir, limit=None, seed=0, keep_all=False):
    """A registered user file → Alpaca rows (``system``/``history`` kept where the file has them). Rows
    without a text instruction and answer are dropped (``keep_all=True`` keeps every row, as text);
    ``seed=None`` keeps the file's order (the contamination scan names rows by their index in the file)."""
    import json
    import random
    from pathlib import Path

    root = Path(dataset_dir)
    info = json.loads((root / ".user_dataset.json").read_text(encoding="utf-8"))
    rows = []
    for rec in read_records(root / info["file_name"]):
        row, system, history = to_row(rec, info)
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


def _nested(func, name: str) -> str:
    """``func``'s source renamed ``name``, indented to sit inside :func:`to_alpaca`."""
    code = textwrap.dedent(inspect.getsource(func)).replace(f"def {func.__name__}(", f"def {name}(", 1)
    return textwrap.indent(code.rstrip(), "    ") + "\n\n"


def converter_code(file_name: str, layout: str) -> str:
    """:func:`to_alpaca` as one self-contained function for a file named ``file_name`` in layout ``layout``
    (``alpaca``/``sharegpt``): its reader and row builder nested in it, the other branches left out. It
    returns what :func:`to_alpaca` returns for that file."""
    from pathlib import Path

    reader = READERS.get(Path(file_name).suffix.lower(), read_json)
    builder = ROWS.get(layout, sharegpt_row)
    code = textwrap.dedent(inspect.getsource(to_alpaca))
    anchor = "    root = Path(dataset_dir)\n"
    return code.replace(anchor, _nested(reader, "read_records") + _nested(builder, "to_row") + anchor, 1)
