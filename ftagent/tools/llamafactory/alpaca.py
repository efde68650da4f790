"""Checks of an Alpaca ``data.json``: a JSON list of ``{instruction, input, output}`` rows.

Token lengths are an approximation, documented here and in docs/training.md: one token per 4 UTF-8
bytes of ``instruction + input + output`` (about right for English BPE vocabularies; digit-split
tokenizers count more tokens for numbers). It is used only for statistics and the cutoff warning.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

BYTES_PER_TOKEN = 4
MAX_BAD_EXAMPLES = 10


class BadRow(BaseModel):
    """A row that cannot be trained on."""

    index: int
    reason: str


class AlpacaReport(BaseModel):
    """The result of :func:`check_alpaca`."""

    ok: bool
    error: str | None = None  # file-level problem (missing, not JSON, not a list, empty, all rows bad)
    total: int = 0
    valid: int = 0
    bad: int = 0
    bad_examples: list[BadRow] = Field(default_factory=list)
    with_input: int = 0
    token_stats: dict[str, float] = Field(default_factory=dict)  # approximate, see module docstring
    over_cutoff: int | None = None  # rows whose approximate length exceeds cutoff_len


def approx_tokens(text: str) -> int:
    """Approximate token count: ceil(UTF-8 bytes / 4)."""
    return math.ceil(len(text.encode("utf-8")) / BYTES_PER_TOKEN)


def row_problem(row: Any) -> str | None:
    """Why ``row`` is not a valid Alpaca row, or None."""
    if not isinstance(row, dict):
        return f"not an object ({type(row).__name__})"
    for key in ("instruction", "output"):
        value = row.get(key)
        if not isinstance(value, str):
            return f"'{key}' missing or not a string"
        if not value.strip():
            return f"'{key}' is empty"
    if row.get("input") is not None and not isinstance(row["input"], str):
        return "'input' is not a string"
    return None


def _percentile(sorted_values: list[int], q: float) -> float:
    index = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))
    return float(sorted_values[index])


def check_alpaca(path: Path, *, cutoff_len: int | None = None, max_bad_fraction: float = 0.0) -> AlpacaReport:
    """Check an Alpaca data file.

    Args:
        path: the ``data.json`` to read.
        cutoff_len: when given, count rows whose approximate length exceeds it.
        max_bad_fraction: share of bad rows tolerated (0 = every row must be valid).

    Returns:
        The report; ``ok`` is False for file-level errors or too many bad rows.
    """
    path = Path(path)
    if not path.is_file():
        return AlpacaReport(ok=False, error=f"{path.name} was not written")
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return AlpacaReport(ok=False, error=f"{path.name} is not valid JSON: {exc}")
    if not isinstance(rows, list):
        return AlpacaReport(ok=False, error=f"{path.name} must hold a JSON list, got {type(rows).__name__}")
    if not rows:
        return AlpacaReport(ok=False, error=f"{path.name} is an empty list")
    bad: list[BadRow] = []
    lengths: list[int] = []
    with_input = 0
    for index, row in enumerate(rows):
        problem = row_problem(row)
        if problem:
            bad.append(BadRow(index=index, reason=problem))
            continue
        with_input += bool(row.get("input"))
        lengths.append(approx_tokens(row["instruction"] + (row.get("input") or "") + row["output"]))
    report = AlpacaReport(ok=True, total=len(rows), valid=len(lengths), bad=len(bad),
                          bad_examples=bad[:MAX_BAD_EXAMPLES], with_input=with_input)
    if lengths:
        lengths.sort()
        report.token_stats = {"min": float(lengths[0]), "p50": _percentile(lengths, 0.5),
                              "p99": _percentile(lengths, 0.99), "max": float(lengths[-1]),
                              "mean": round(sum(lengths) / len(lengths), 1)}
        if cutoff_len:
            report.over_cutoff = sum(1 for n in lengths if n > cutoff_len)
    if not lengths:
        report.ok, report.error = False, "no valid row"
    elif len(bad) > max_bad_fraction * len(rows):
        report.ok = False
        report.error = f"{len(bad)} of {len(rows)} rows are invalid"
    return report


def describe(report: AlpacaReport) -> str:
    """A short text of the report for feedback and logs."""
    if report.total == 0:
        return report.error or "no data"
    parts = [f"{report.valid}/{report.total} valid rows"]
    if report.error:
        parts.insert(0, report.error)
    parts += [f"row {b.index}: {b.reason}" for b in report.bad_examples]
    return "; ".join(parts)
