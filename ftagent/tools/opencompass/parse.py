"""Parse an OpenCompass work dir: metrics per dataset, the core score, failures and error samples.

Handles both detail layouts of OpenCompass 0.5.4: a list of dicts with ``correct`` (BaseEvaluator
subclasses) and a dict keyed by index (``AccEvaluator`` / ``AccwithDetailsEvaluator``).

One run may hold several splits: their datasets are named ``<abbr>@<split>`` (:func:`split_abbr`)
and ``split=`` selects one of them, with the suffix removed (so results read as a one-split run).
"""

from __future__ import annotations

import csv
import json
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ftagent.core.types import AnswerProfile

MAX_FIELD = 600
_TRUE = {"A", "CORRECT", "TRUE", "YES", "1"}
SKIP_COLS = {"dataset", "version", "metric", "mode"}
SPLIT_SEP = "@"


def split_abbr(abbr: str, split: str) -> str:
    """The dataset name of ``abbr`` in a run holding several splits."""
    return f"{abbr}{SPLIT_SEP}{split}"


def split_of(name: str, split: str | None) -> str | None:
    """``name`` without its ``@<split>`` suffix when it belongs to ``split``; None when it belongs to
    another split. ``split=None`` keeps every name unchanged (a one-split run)."""
    if split is None:
        return name
    suffix = f"{SPLIT_SEP}{split}"
    return name[: -len(suffix)] if name.endswith(suffix) else None


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


def read_metrics(run: Path, split: str | None = None) -> dict[str, dict[str, float]]:
    """``{dataset: {metric: value}}`` from the summary csv (first model column), of ``split`` only
    when given (see :func:`split_of`)."""
    out: dict[str, dict[str, float]] = {}
    for row in read_summary(run):
        cols = [c for c in row if c not in SKIP_COLS]
        name = split_of(row.get("dataset", ""), split)
        if not cols or name is None:
            continue
        try:
            value = float(row[cols[0]])
        except (TypeError, ValueError):
            continue
        out.setdefault(name, {})[row["metric"]] = value
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


def _result_files(run: Path, split: str | None) -> list[tuple[str, Path]]:
    """``(dataset, results file)`` of ``split``, in the order of a one-split run's file names."""
    found = []
    for result in (run / "results").glob("*/*.json"):
        name = split_of(result.stem, split)
        if name is not None:
            found.append(((result.parent.name, name + result.suffix), name, result))
    return [(name, result) for _, name, result in sorted(found)]


def _scored(run: Path, split: str | None) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """``(dataset, detail, prediction record)`` of every scored item of ``split`` (results + predictions)."""
    for name, result in _result_files(run, split):
        data = json.loads(result.read_text(encoding="utf-8"))
        pred_file = run / "predictions" / result.parent.name / result.name
        preds = json.loads(pred_file.read_text(encoding="utf-8")) if pred_file.exists() else {}
        for idx, det in _entries(data.get("details")):
            yield name, det, preds.get(str(idx), {})


def error_samples(run: Path, max_samples: int = 10, seed: int = 0,
                  split: str | None = None) -> list[dict[str, Any]]:
    """Up to ``max_samples`` wrong samples ``{dataset, question, gold, model_output}`` (seeded choice)
    of ``split`` when given (see :func:`split_of`)."""
    wrong = [{
        "dataset": name,
        "question": _text(p.get("origin_prompt") or det.get("origin_prompt") or det.get("prompt")),
        "gold": _text(_first(p.get("gold", det.get("answer", det.get("refr", det.get("references")))))),
        "model_output": _text(_first(p.get("prediction", det.get("origin_prediction", det.get("pred"))))),
    } for name, det, p in _scored(run, split) if not is_correct(det)]
    if len(wrong) > max_samples:
        wrong = random.Random(seed).sample(wrong, max_samples)
    return wrong


TOP_PREDICTIONS = 5
PREDICTION_CHARS = 60


def prediction_profile(run: Path, split: str | None = None) -> AnswerProfile | None:
    """How the model answered ``split``: scored items, wrong ones, and the predictions (as scored,
    whitespace collapsed, clipped) given most often, only those given more than once; None without
    scored items.

    A model that answers everything the same way (a constant "No") shows up here at once.
    """
    items = wrong = 0
    counts: Counter[str] = Counter()
    for _, det, p in _scored(run, split):
        items += 1
        wrong += not is_correct(det)
        pred = _first(det.get("pred", p.get("prediction")))
        text = " ".join(str(pred if pred is not None else "").split())
        counts[text if len(text) <= PREDICTION_CHARS else text[:PREDICTION_CHARS] + "…"] += 1
    top = {text: n for text, n in counts.most_common(TOP_PREDICTIONS) if n > 1}
    return AnswerProfile(items=items, wrong=wrong, top=top) if items else None


def read_predictions(run: Path, split: str | None = None) -> dict[str, dict[str, Any]]:
    """``{dataset: {index: prediction}}`` of ``split`` (see :func:`split_of`) from ``predictions/``."""
    out: dict[str, dict[str, Any]] = {}
    for pred in sorted((run / "predictions").glob("*/*.json")):
        name = split_of(pred.stem, split)
        if name is None:
            continue
        data = json.loads(pred.read_text(encoding="utf-8"))
        out[name] = {str(k): v.get("prediction") for k, v in data.items() if isinstance(v, dict)}
    return out


def split_complete(run: Path | None, abbrs: list[str]) -> bool:
    """True when every dataset of ``abbrs`` has a results file and no ``-`` in the summary."""
    if run is None:
        return False
    have = {p.stem for p in (run / "results").glob("*/*.json")}
    if not set(abbrs) <= have:
        return False
    rows = [r for r in read_summary(run) if r.get("dataset") in set(abbrs)]
    if {r.get("dataset") for r in rows} != set(abbrs):
        return False
    return not any((v or "").strip() == "-" for r in rows for v in r.values())
