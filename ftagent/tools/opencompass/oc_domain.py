"""ftagent's OpenCompass extension for the domain families (PANORAMA, ChemCoTBench, TableBench,
BioProBench), imported by rendered configs inside the tool env.

Standalone on purpose: it imports OpenCompass, the standard library and
:mod:`ftagent.benchmarks.domain` (itself standard library only), never ftagent's core.

:class:`DomainEvaluator` (registered in ``ICL_EVALUATORS``) scores one sub-task with
:func:`ftagent.benchmarks.domain.evaluate_subtask` on the full items, read back from the
``item_json`` column of the prepared JSONL (OpenCompass passes the whole row set as ``test_set``;
without it the JSONL at ``items_path`` is reloaded). It returns every numeric metric, the sub-task's
core metric also under ``headline`` (``mean_core`` for keys grouping several sub-tasks),
``num_items``, ``status``/``reason`` strings when a metric is not computable here (RDKit missing,
oracle unavailable: such metrics are left out, never scored 0) and per-sample details.
"""

from __future__ import annotations

import json
from typing import Any

from opencompass.openicl.icl_evaluator import BaseEvaluator
from opencompass.registry import ICL_EVALUATORS

from ftagent.benchmarks.domain import evaluate_subtask

MAX_DETAIL = 2000
_FULL_MARK = {"kendall_tau": 1.0}  # per-item core value that counts as "correct" (else 100)


def numeric_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    """The numeric entries of a domain metrics dict (``None``, strings and bools dropped)."""
    return {k: float(v) for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


def load_items(test_set: Any, items_path: str | None, n: int) -> list[dict[str, Any]]:
    """The full items: ``test_set["item_json"]`` when present, else the JSONL at ``items_path``."""
    if test_set is not None and "item_json" in getattr(test_set, "column_names", []):
        rows = list(test_set["item_json"])
    elif items_path:
        with open(items_path, encoding="utf-8") as fh:
            rows = [json.loads(line)["item_json"] for line in fh if line.strip()]
    else:
        raise ValueError("DomainEvaluator needs the item_json column or items_path")
    if len(rows) != n:
        raise ValueError(f"{len(rows)} items for {n} predictions")
    return [json.loads(r) if isinstance(r, str) else dict(r) for r in rows]


def _clip(text: Any) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= MAX_DETAIL else text[:MAX_DETAIL] + "…[truncated]"


@ICL_EVALUATORS.register_module()
class DomainEvaluator(BaseEvaluator):
    """Scores one domain sub-task with ftagent's metrics (see the module docstring)."""

    def __init__(self, family: str, subtask: str, core_metric: str, headline: str | None = None,
                 items_path: str | None = None, metric_kwargs: dict[str, Any] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.family, self.subtask, self.core_metric = family, subtask, core_metric
        self.headline, self.items_path = headline, items_path
        self.metric_kwargs = dict(metric_kwargs or {})

    def _metrics(self, predictions: list[str], items: list[dict[str, Any]]) -> dict[str, Any]:
        return evaluate_subtask(self.family, self.subtask, predictions, items, **self.metric_kwargs)

    def _detail(self, pred: str, ref: Any, item: dict[str, Any], one: dict[str, Any] | None = None) -> dict[str, Any]:
        """One answer's details entry; ``one``: its metrics when the scorer already gave them per item
        (``per_item``: TableBench's charts, so no program runs twice), else they are computed here."""
        one = self._metrics([pred], [item]) if one is None else one
        value = one.get(self.core_metric)
        detail: dict[str, Any] = {"pred": _clip(pred), "answer": _clip(ref), "core_metric": self.core_metric,
                                  "score": float(value) if isinstance(value, (int, float)) else None}
        if detail["score"] is not None:
            detail["correct"] = detail["score"] >= _FULL_MARK.get(self.core_metric, 100.0) - 1e-9
        if one.get("status"):
            detail["status"] = str(one["status"])
        for key in ("chart_timeouts", "chart_timed_out"):  # a verdict a loaded machine may have decided
            if one.get(key):
                detail[key] = one[key]
        return detail

    def score(self, predictions, references, test_set=None):  # noqa: D102 - OpenCompass hook
        predictions = ["" if p is None else str(p) for p in predictions]
        items = load_items(test_set, self.items_path, len(predictions))
        refs = list(references) if references is not None else [""] * len(items)
        metrics = self._metrics(predictions, items)
        per_item = metrics.pop("per_item", None) or [None] * len(items)
        result: dict[str, Any] = dict(numeric_metrics(metrics))
        core = result.get(self.core_metric)
        if self.headline and core is not None:
            result[self.headline] = core
        result["num_items"] = float(len(predictions))
        for field in ("status", "reason"):
            if metrics.get(field):
                result[field] = str(metrics[field])
        unavailable = sorted(k for k, v in metrics.items() if v is None)
        if unavailable:
            result["unavailable_metrics"] = ", ".join(unavailable)
        result["details"] = [self._detail(p, r, it, one)
                             for p, r, it, one in zip(predictions, refs, items, per_item, strict=True)]
        return result
