"""Parse an OpenCompass work dir: metrics per dataset, the core score, failures and error samples.

Handles both detail layouts of OpenCompass 0.5.4: a list of dicts with ``correct`` (BaseEvaluator
subclasses) and a dict keyed by index (``AccEvaluator`` / ``AccwithDetailsEvaluator``).
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path
from typing import Any

MAX_FIELD = 600
_TRUE = {"A", "CORRECT", "TRUE", "YES", "1"}
SKIP_COLS = {"dataset", "version", "metric", "mode"}


def latest_run(work_dir: Path) -> Path | None:
    """The newest ``<YYYYMMDD_HHMMSS>`` folder under ``work_dir`` (None when there is none)."""
    runs = sorted(p for p in Path(work_dir).glob("[0-9]*_[0-9]*") if p.is_dir())
    return runs[-1] if runs else None


def read_summary(run: Path) -> list[dict[str, str]]:
    """Rows of the newest ``summary/summary_*.csv`` ([] when absent)."""
    files = sorted((run / "summary").glob("summary_*.csv"))
    if not files:
        return []
    with files[-1].open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def failure_reason(run: Path | None) -> str | None:
    """Why a run failed (None = success): no run, no results, no summary, or ``-`` in the summary."""
    if run is None:
        return "OpenCompass produced no run folder"
    if not list((run / "results").glob("*/*.json")):
        return "OpenCompass wrote no results files"
    rows = read_summary(run)
    if not rows:
        return "OpenCompass wrote no summary csv"
    bad = [r.get("dataset", "?") for r in rows if any((v or "").strip() == "-" for v in r.values())]
    return f"failed datasets (\"-\" in the summary): {', '.join(bad)}" if bad else None


def read_metrics(run: Path) -> dict[str, dict[str, float]]:
    """``{dataset: {metric: value}}`` from the summary csv (first model column)."""
    out: dict[str, dict[str, float]] = {}
    for row in read_summary(run):
        cols = [c for c in row if c not in SKIP_COLS]
        if not cols:
            continue
        try:
            value = float(row[cols[0]])
        except (TypeError, ValueError):
            continue
        out.setdefault(row["dataset"], {})[row["metric"]] = value
    return out


def core_score(metrics: dict[str, dict[str, float]], core_metric: str) -> float | None:
    """Plain mean of ``core_metric`` over the datasets (sub-datasets weigh equally)."""
    values = [m[core_metric] for m in metrics.values() if core_metric in m]
    return sum(values) / len(values) if values else None


def _truthy(value: Any) -> bool:
    if isinstance(value, list):
        return bool(value) and all(_truthy(v) for v in value)
    if isinstance(value, str):
        return value.strip().upper() in _TRUE
    return bool(value)


def is_correct(detail: dict[str, Any]) -> bool:
    """Correctness of one detail entry; first known field wins, else incorrect."""
    for key in ("cascade_correct", "correct", "is_correct", "exact_match"):
        if key in detail:
            return _truthy(detail[key])
    for key, sub in (("llm_evaluation", "llm_correct"), ("rule_evaluation", "correct")):
        val = detail.get(key)
        if isinstance(val, list) and val and isinstance(val[0], dict) and sub in val[0]:
            return _truthy(val[0][sub])
    return False


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, list) and value else value


def _text(value: Any) -> str:
    if isinstance(value, list):  # chat turns from origin_prompt
        value = "\n".join(f"{t.get('role', '')}: {t.get('prompt', '')}" if isinstance(t, dict) else str(t)
                          for t in value)
    text = "" if value is None else str(value)
    return text if len(text) <= MAX_FIELD else text[:MAX_FIELD] + "…[truncated]"


def _entries(details: Any) -> list[tuple[int, dict[str, Any]]]:
    if isinstance(details, list):
        return [(i, d) for i, d in enumerate(details) if isinstance(d, dict)]
    if isinstance(details, dict):
        return [(int(k), v) for k, v in details.items() if k.isdigit() and isinstance(v, dict)]
    return []


def error_samples(run: Path, max_samples: int = 10, seed: int = 0) -> list[dict[str, Any]]:
    """Up to ``max_samples`` wrong samples ``{dataset, question, gold, model_output}`` (seeded choice)."""
    wrong: list[dict[str, Any]] = []
    for result in sorted((run / "results").glob("*/*.json")):
        data = json.loads(result.read_text(encoding="utf-8"))
        pred_file = run / "predictions" / result.parent.name / result.name
        preds = json.loads(pred_file.read_text(encoding="utf-8")) if pred_file.exists() else {}
        for idx, det in _entries(data.get("details")):
            if is_correct(det):
                continue
            p = preds.get(str(idx), {})
            wrong.append({
                "dataset": result.stem,
                "question": _text(p.get("origin_prompt") or det.get("origin_prompt") or det.get("prompt")),
                "gold": _text(_first(p.get("gold", det.get("answer", det.get("refr", det.get("references")))))),
                "model_output": _text(_first(p.get("prediction", det.get("origin_prediction", det.get("pred"))))),
            })
    if len(wrong) > max_samples:
        wrong = random.Random(seed).sample(wrong, max_samples)
    return wrong
