"""A user's dataset file as ``--dataset`` reads it: the same rows written as JSONL, JSON, CSV or parquet."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_user_file(path: Path, rows: list[dict[str, Any]]) -> Path:
    """``rows`` written to ``path`` in the format its suffix names: ``.jsonl``, ``.json``, ``.csv``, ``.parquet``."""
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    elif path.suffix == ".json":
        path.write_text(json.dumps(rows), encoding="utf-8")
    elif path.suffix in (".csv", ".parquet"):
        import pandas as pd  # only these two need it (pandas is the tool env's and ftagent's reader too)

        frame = pd.DataFrame(rows)
        if path.suffix == ".csv":
            frame.to_csv(path, index=False)
        else:
            frame.to_parquet(path)
    else:
        raise ValueError(f"no user-file format for {path.name}")
    return path
