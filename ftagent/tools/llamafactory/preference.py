"""Checks of preference data (issue 40), like :mod:`.alpaca` for SFT rows.

* ``pairwise`` (DPO, ORPO, SimPO): ``{instruction, input?, chosen, rejected}`` — LLaMA-Factory's Alpaca
  converter with ``ranking: true`` (llamafactory 0.9.5 ``data/converter.py`` AlpacaDatasetConverter: a
  pairwise example needs ``chosen`` and ``rejected`` to be strings, else the row silently becomes
  an unsupervised one);
* ``kto``: ``{instruction, input?, output, kto_tag}`` — ``kto_tag`` must be a JSON boolean (the converter
  tests ``isinstance(..., bool)``; a string "true" would train it as a plain SFT row), and KTO needs both
  desirable (true) and undesirable (false) rows (``data/processor/feedback.py`` only warns).

:func:`check_data` dispatches on the stage's data format and returns the same
:class:`~.alpaca.AlpacaReport` the SFT check does, so the validator and the report read one shape.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ftagent.tools.llamafactory.alpaca import (
    MAX_BAD_EXAMPLES,
    AlpacaReport,
    BadRow,
    _percentile,
    approx_tokens,
    check_alpaca,
)
from ftagent.tools.llamafactory.alpaca import row_problem as alpaca_problem

ROW_SHAPES = {
    "alpaca": "a JSON list of objects with non-empty string 'instruction' and 'output' (and an optional string 'input')",
    "pairwise": "a JSON list of objects with non-empty string 'instruction', 'chosen' and 'rejected' (chosen != "
                "rejected; an optional string 'input')",
    "kto": "a JSON list of objects with non-empty string 'instruction' and 'output', a JSON boolean 'kto_tag' "
           "(true: a desirable answer) and an optional string 'input'; both true and false rows",
}


def _text_problem(row: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    for key in keys:
        value = row.get(key)
        if not isinstance(value, str):
            return f"'{key}' missing or not a string"
        if not value.strip():
            return f"'{key}' is empty"
    if row.get("input") is not None and not isinstance(row["input"], str):
        return "'input' is not a string"
    return None


def row_problem(row: Any, data_format: str) -> str | None:
    """Why ``row`` cannot be trained on in ``data_format``, or None."""
    if data_format == "alpaca":
        return alpaca_problem(row)
    if not isinstance(row, dict):
        return f"not an object ({type(row).__name__})"
    if data_format == "pairwise":
        problem = _text_problem(row, ("instruction", "chosen", "rejected"))
        if problem is None and row["chosen"].strip() == row["rejected"].strip():
            problem = "'chosen' and 'rejected' are the same answer"
        return problem
    problem = _text_problem(row, ("instruction", "output"))
    if problem is None and not isinstance(row.get("kto_tag"), bool):
        problem = f"'kto_tag' must be true or false (a JSON boolean), got {json.dumps(row.get('kto_tag'))[:40]}"
    return problem


def _tokens(row: dict[str, Any], data_format: str) -> int:
    prompt = row["instruction"] + (row.get("input") or "")
    if data_format == "pairwise":  # the longer of the two sequences is what cutoff_len cuts
        return approx_tokens(prompt + max(row["chosen"], row["rejected"], key=len))
    return approx_tokens(prompt + row["output"])


def check_data(path: Path, data_format: str, *, cutoff_len: int | None = None) -> AlpacaReport:
    """Check ``data.json`` for a stage's format (``alpaca`` is :func:`.alpaca.check_alpaca` itself)."""
    if data_format == "alpaca":
        return check_alpaca(path, cutoff_len=cutoff_len)
    path = Path(path)
    if not path.is_file():
        return AlpacaReport(ok=False, error=f"{path.name} was not written")
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return AlpacaReport(ok=False, error=f"{path.name} is not valid JSON: {exc}")
    if not isinstance(rows, list) or not rows:
        return AlpacaReport(ok=False, error=f"{path.name} must hold a non-empty JSON list")
    bad: list[BadRow] = []
    lengths: list[int] = []
    tags: set[bool] = set()
    for index, row in enumerate(rows):
        problem = row_problem(row, data_format)
        if problem:
            bad.append(BadRow(index=index, reason=problem))
            continue
        lengths.append(_tokens(row, data_format))
        if data_format == "kto":
            tags.add(row["kto_tag"])
    report = AlpacaReport(ok=not bad and bool(lengths), total=len(rows), valid=len(lengths), bad=len(bad),
                          bad_examples=bad[:MAX_BAD_EXAMPLES],
                          with_input=sum(1 for r in rows if isinstance(r, dict) and r.get("input")))
    if lengths:
        lengths.sort()
        report.token_stats = {"min": float(lengths[0]), "p50": _percentile(lengths, 0.5),
                              "p99": _percentile(lengths, 0.99), "max": float(lengths[-1]),
                              "mean": round(sum(lengths) / len(lengths), 1)}
        if cutoff_len:
            report.over_cutoff = sum(1 for n in lengths if n > cutoff_len)
    if bad:
        report.error = f"{len(bad)} of {len(rows)} rows are invalid"
    elif data_format == "kto" and len(tags) < 2:
        report.ok = False
        report.error = f"every row has kto_tag {tags.pop() if tags else None}: KTO needs desirable and undesirable rows"
    return report
