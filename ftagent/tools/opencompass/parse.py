"""Parse an OpenCompass work dir: metrics per dataset, the core score, failures and error samples.

Handles both detail layouts of OpenCompass 0.5.4: a list of dicts with ``correct`` (BaseEvaluator
subclasses) and a dict keyed by index (``AccEvaluator`` / ``AccwithDetailsEvaluator``).

One run may hold several splits: their datasets are named ``<abbr>@<split>`` (:func:`split_abbr`)
and ``split=`` selects one of them, with the suffix removed (so results read as a one-split run).

Runs (``FT_BENCHMARK_NUM_RUNS`` = ``n`` > 1): OpenCompass's ``BaseEvaluator.evaluate`` scores each
replica and renames every numeric metric ``"<metric> (<n> runs average)"`` (the mean over the runs);
with ``k`` > 1 (``FT_BENCHMARK_PASS_K``) it adds ``G-Pass@<k>_<t>`` and ``mG-Pass@<k>`` (and the same
per "subdivision", ``<abbr up to its first _>/G-Pass@...``). Its details hold one entry per item whose
fields are lists of the ``n`` runs, and the predictions file holds ``n × items`` records (run ``r`` of
item ``i`` at ``r × items + i``). Here every (item, run) is one scored answer (:func:`_scored`), and
the core metric is the benchmark's metric or its runs average (:func:`core_value`).
"""

from __future__ import annotations

import csv
import json
import random
import re
from collections import Counter
from collections.abc import Callable, Iterator
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


RUNS_AVERAGE = re.compile(r"^(?P<metric>.+) \((?P<runs>\d+) runs average\)$")


def metric_runs(name: str) -> tuple[str, int]:
    """``(metric, runs)`` of a summary metric name: ``"accuracy (2 runs average)"`` → ``("accuracy", 2)``;
    a name without the suffix is one run."""
    match = RUNS_AVERAGE.match(name)
    return (match["metric"], int(match["runs"])) if match else (name, 1)


def core_value(dataset_metrics: dict[str, float], core_metric: str) -> float | None:
    """``core_metric`` of one dataset: the exact name, else its runs average (OpenCompass renames the
    metric when a dataset has ``n`` > 1); None when neither is there."""
    if core_metric in dataset_metrics:
        return dataset_metrics[core_metric]
    for name, value in dataset_metrics.items():
        metric, runs = metric_runs(name)
        if runs > 1 and metric == core_metric:
            return value
    return None


def core_score(metrics: dict[str, dict[str, float]], core_metric: str) -> float | None:
    """Plain mean of ``core_metric`` (or its runs average) over the datasets (sub-datasets weigh equally)."""
    values = [v for m in metrics.values() if (v := core_value(m, core_metric)) is not None]
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


def _runs_of(detail: dict[str, Any]) -> list[dict[str, Any]]:
    """One detail per run. ``BaseEvaluator.evaluate`` groups an item's runs into one entry (with
    ``example_abbr``) whose fields are lists of the runs; other fields (G-Pass@k values) are the item's
    own and stay. A detail without ``example_abbr`` is one run, as written."""
    if "example_abbr" not in detail:
        return [detail]
    runs = max((len(v) for v in detail.values() if isinstance(v, list)), default=0)
    if runs == 0:
        return [detail]
    return [{k: v[r] if isinstance(v, list) and len(v) == runs else v for k, v in detail.items()}
            for r in range(runs)]


def _result_files(run: Path, split: str | None) -> list[tuple[str, Path]]:
    """``(dataset, results file)`` of ``split``, in the order of a one-split run's file names."""
    found = []
    for result in (run / "results").glob("*/*.json"):
        name = split_of(result.stem, split)
        if name is not None:
            found.append(((result.parent.name, name + result.suffix), name, result))
    return [(name, result) for _, name, result in sorted(found)]


def _scored(run: Path, split: str | None) -> Iterator[tuple[str, int, dict[str, Any], dict[str, Any]]]:
    """``(dataset, item index, detail, prediction record)`` of every scored answer of ``split``
    (results + predictions): one per item and run (run ``r`` of item ``i`` is prediction
    ``r × items + i``, OpenCompass's replica order)."""
    for name, result in _result_files(run, split):
        data = json.loads(result.read_text(encoding="utf-8"))
        pred_file = run / "predictions" / result.parent.name / result.name
        preds = json.loads(pred_file.read_text(encoding="utf-8")) if pred_file.exists() else {}
        entries = _entries(data.get("details"))
        for idx, det in entries:
            for r, one in enumerate(_runs_of(det)):
                yield name, idx, one, preds.get(str(r * len(entries) + idx), {})


ItemFilter = Callable[[str, str], bool]  # (dataset, item id) -> keep


def item_id(idx: int, detail: dict[str, Any]) -> str:
    """The item's id as :mod:`~ftagent.tools.opencompass.items` keys it: ``example_abbr``'s index, else ``idx``."""
    abbr = detail.get("example_abbr")
    match = re.search(r"_(\d+)$", abbr) if isinstance(abbr, str) else None
    return match[1] if match else str(idx)


def error_samples(run: Path, max_samples: int = 10, seed: int = 0,
                  split: str | None = None, keep: ItemFilter | None = None) -> list[dict[str, Any]]:
    """Up to ``max_samples`` wrong answers ``{dataset, question, gold, model_output}`` (seeded choice)
    of ``split`` when given (see :func:`split_of`).

    With several runs each run's wrong answer counts, once per distinct output of an item (greedy
    runs that agree give one sample, not ``n`` copies).
    """
    wrong: list[dict[str, Any]] = []
    seen: set[tuple[str, int, str]] = set()
    for name, idx, det, p in _scored(run, split):
        if is_correct(det) or (keep is not None and not keep(name, item_id(idx, det))):
            continue
        sample = {
            "dataset": name,
            "question": _text(p.get("origin_prompt") or det.get("origin_prompt") or det.get("prompt")),
            "gold": _text(_first(p.get("gold", det.get("answer", det.get("refr", det.get("references")))))),
            "model_output": _text(_first(p.get("prediction", det.get("origin_prediction", det.get("pred"))))),
        }
        if (name, idx, sample["model_output"]) not in seen:
            seen.add((name, idx, sample["model_output"]))
            wrong.append(sample)
    if len(wrong) > max_samples:
        wrong = random.Random(seed).sample(wrong, max_samples)
    return wrong


TOP_PREDICTIONS = 5
PREDICTION_CHARS = 60


def prediction_profile(run: Path, split: str | None = None, keep: ItemFilter | None = None) -> AnswerProfile | None:
    """How the model answered ``split``: scored answers, wrong ones, and the predictions (as scored,
    whitespace collapsed, clipped) given most often, only those given more than once, among all answers
    (``top``: a constant answer is a collapse) and among the wrong ones (``top_wrong``: what the planner is
    shown, since a right answer given twice is two items' gold); None without scored answers.

    With ``n`` runs every item counts ``n`` times (one answer per run), so ``1 - wrong / items`` is
    the runs average OpenCompass reports. A model that answers everything the same way (a constant
    "No") shows up here at once.
    """
    items = wrong = 0
    counts: Counter[str] = Counter()
    wrong_counts: Counter[str] = Counter()
    distinct: set[tuple[Any, Any]] = set()
    for abbr, index, det, p in _scored(run, split):
        if keep is not None and not keep(abbr, item_id(index, det)):
            continue
        items += 1
        distinct.add((abbr, index))
        pred = _first(det.get("pred", p.get("prediction")))
        text = " ".join(str(pred if pred is not None else "").split())
        text = text if len(text) <= PREDICTION_CHARS else text[:PREDICTION_CHARS] + "…"
        counts[text] += 1
        if not is_correct(det):
            wrong += 1
            wrong_counts[text] += 1
    top = {text: n for text, n in counts.most_common(TOP_PREDICTIONS) if n > 1}
    top_wrong = {text: n for text, n in wrong_counts.most_common(TOP_PREDICTIONS) if n > 1}
    runs = max(1, round(items / len(distinct))) if distinct else 1
    return AnswerProfile(items=items, wrong=wrong, top=top, top_wrong=top_wrong, runs=runs) if items else None


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
