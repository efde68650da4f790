"""Per-item scores of one OpenCompass run (:class:`~ftagent.core.stats.ItemScores`), keyed by item id.

The id of an item is OpenCompass's own: ``BaseEvaluator.evaluate`` (opencompass 0.5.4,
``openicl/icl_evaluator/icl_base_evaluator.py``, ``group``) writes every detail with
``example_abbr = f"{subdivision}_{idx}"``, where ``idx`` is the row index in the dataset
(``opencompass/datasets/base.py`` adds ``subdivision`` and ``idx`` to every row). The record keeps
``idx`` per dataset, so two models' evaluations of the same split pair item by item whatever order or
gaps their details have. Details without ``example_abbr``, or with an id twice, give a record with
``no_interval`` set (pairing by position could misattribute every later item).

An item's value is its correctness (0/1; the mean over the runs with ``FT_BENCHMARK_NUM_RUNS`` > 1),
or a domain evaluator's per-item ``score`` / 100 (``oc_domain.DomainEvaluator``). The record says
"no interval" unless each dataset's reported core metric equals ``100 ×`` (or ``1 ×``) the mean of its
item values: that is the check that the metric is a mean over items (accuracy, pass@1, a mean ROUGE-L)
and not a corpus-level one (macro-F1, BLEU, a G-Pass@k), for which a per-item bootstrap would be invented.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ftagent.core.stats import ItemScores
from ftagent.tools.opencompass.parse import _entries, _result_files, _runs_of, core_value, is_correct

# the summary csv rounds metrics to 2 decimals
MEAN_TOLERANCE = 0.011
_INDEX = re.compile(r"_(\d+)$")


def _score_value(detail: dict[str, Any]) -> float | None:
    """A domain evaluator's per-item score on 0-100, as a value in [0, 1] (None: none or out of range)."""
    score = detail.get("score")
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not 0 <= score <= 100:
        return None
    return float(score) / 100.0


def _read(run: Path, split: str | None) -> tuple[dict[str, dict[str, list[list[Any]]]], str | None]:
    """``{dataset: {item id: [correctness per run, score per run]}}``, or why ids are missing."""
    out: dict[str, dict[str, list[list[Any]]]] = {}
    for name, result in _result_files(run, split):
        data = json.loads(result.read_text(encoding="utf-8"))
        entries = _entries(data.get("details"))
        if not entries:
            return {}, f"{name}: OpenCompass wrote no per-item details"
        per_item = out.setdefault(name, {})
        for _, det in entries:
            abbr = det.get("example_abbr")
            match = _INDEX.search(abbr) if isinstance(abbr, str) else None
            if match is None:
                return {}, f"{name}: per-item details without item ids (example_abbr)"
            item = match[1]
            if item in per_item:
                return {}, f"{name}: item id {item} appears twice in the details"
            runs = _runs_of(det)
            per_item[item] = [[float(is_correct(one)) for one in runs], [_score_value(one) for one in runs]]
    return out, None


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _matches(values: dict[str, float], reported: float) -> float | None:
    """The scale (100 or 1) at which the mean of ``values`` is the reported metric, else None."""
    mean = _mean(list(values.values()))
    for scale in (100.0, 1.0):
        if abs(scale * mean - reported) <= MEAN_TOLERANCE:
            return scale
    return None


def item_scores(run: Path, split: str, core_metric: str, metrics: dict[str, dict[str, float]], *,
                benchmark: str = "", one_split: bool = False) -> ItemScores:
    """The per-item record of ``split`` in ``run`` (``metrics``: that split's, from :func:`parse.read_metrics`).

    ``one_split``: the run holds this split only (dataset names without ``@<split>``).
    """
    record = ItemScores(benchmark=benchmark, split=split, core_metric=core_metric)
    raw, why = _read(run, None if one_split else split)
    if why is not None:
        return record.model_copy(update={"no_interval": why})
    items: dict[str, dict[str, float]] = {}
    scales: set[float] = set()
    for name, per_item in raw.items():
        reported = core_value(metrics.get(name, {}), core_metric)
        if reported is None:
            return record.model_copy(update={"no_interval": f"{name}: no {core_metric} in the summary"})
        variants = [{i: _mean(c) for i, (c, _) in per_item.items()}]
        if all(None not in s for _, s in per_item.values()):
            variants.insert(0, {i: _mean(s) for i, (_, s) in per_item.items()})  # the evaluator's own score first
        for values in variants:
            scale = _matches(values, reported)
            if scale is not None:
                items[name] = values
                scales.add(scale)
                break
        else:
            return record.model_copy(update={
                "no_interval": f"{core_metric} of {name} ({reported:g}) is not a mean over its items"})
    if len(scales) > 1:
        return record.model_copy(update={"no_interval": "the datasets' metrics are on different scales"})
    return record.model_copy(update={"items": items, "scale": scales.pop() if scales else 100.0})


def items_path(run: Path, split: str) -> Path:
    """Where the record of ``split`` is written: ``<run>/item_scores_<split>.json``, beside ``results/``."""
    return Path(run) / f"item_scores_{split}.json"


def write_item_scores(run: Path, split: str, core_metric: str, metrics: dict[str, dict[str, float]], *,
                      benchmark: str = "", one_split: bool = False) -> str | None:
    """Build and write the record; its path (None when it could not be written: no interval then)."""
    try:
        record = item_scores(run, split, core_metric, metrics, benchmark=benchmark, one_split=one_split)
        return str(record.save(items_path(run, split)))
    except (OSError, ValueError):
        return None
