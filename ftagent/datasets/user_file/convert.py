"""The default converter of a registered user file: its rows as Alpaca rows. Its source is what the planner is
shown and what a data script may copy (``ftagent datasets show <name> --code``), so it imports what it needs
inside itself and reads only its dataset folder (``.user_dataset.json`` and the copy)."""

from __future__ import annotations


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
