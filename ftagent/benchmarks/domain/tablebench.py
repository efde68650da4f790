"""TableBench: loader, prompts, "Final Answer:" extraction and metrics (EM, ±10 %, ROUGE-L, charts).

Data: HF ``Multilingual-Multimodal-NLP/TableBench``, file ``TableBench_TCoT.jsonl`` (fields ``id``,
``qtype``, ``qsubtype``, ``instruction``, ``table`` {columns, data}, ``question``, ``answer``,
``chart_type``). Visualization answers are executed by :mod:`.sandbox`. Standard library only.
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
import string
from collections.abc import Sequence
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from . import sandbox
from .common import as_obj, mean, pct, read_records, rouge_l, strip_think

QTYPES = {"fact_checking": "FactChecking", "numerical_reasoning": "NumericalReasoning",
          "data_analysis": "DataAnalysis", "visualization": "Visualization"}
NUMERIC_ANALYSIS = ("CorrelationAnalysis", "TrendForecasting", "StatisticalAnalysis")
DEFAULT_FILE = "TableBench_TCoT.jsonl"
# a missing value in a y_references literal: ``np.nan`` as the published rows write it (the official scorer execs
# the literal where ``np`` is numpy), or a bare ``nan``
_NAN = re.compile(r"(?<![\w.])(?:(?:np|numpy)\.)?(?:nan|NaN|NAN)(?![\w.])")
#: the official limit of one chart program (parse_tablebench_instruction_response_script.py: ``@timeout(15)``
#: on ``execute``); a run that times out is run once more with :data:`RETRY_FACTOR` times the limit
CHART_LIMIT_S = 15.0
RETRY_FACTOR = 4.0


# ---------------------------------------------------------------- loader and prompts

def table_text(table: dict[str, Any]) -> str:
    """``c1 | c2`` header, a dashed line, then one `` | ``-joined line per row."""
    header = " | ".join(str(c) for c in table.get("columns", []))
    rows = [" | ".join(str(v) for v in row) for row in table.get("data", [])]
    return "\n".join([header, "-" * max(3, len(header))] + rows)


def item_from_row(row: dict[str, Any]) -> dict[str, Any]:
    """One published row as an item: adds ``table_raw`` (the dict) and ``table`` (plain text); the
    ``answer`` as a string."""
    item = dict(row)
    raw = as_obj(row.get("table")) or {}
    item["table_raw"], item["table"] = raw, table_text(raw)
    item["answer"] = "" if row.get("answer") is None else str(row["answer"])
    return item


def load_items(root: str, qtype: str | None = None, filename: str = DEFAULT_FILE) -> list[dict[str, Any]]:
    """Items of ``<root>/<filename>`` (``qtype`` = a key of :data:`QTYPES` or a raw qtype), each
    built by :func:`item_from_row`."""
    wanted = QTYPES.get(qtype, qtype) if qtype else None
    return [item_from_row(row) for row in read_records(os.path.join(root, filename))
            if not wanted or row.get("qtype") == wanted]


_TAILS = {
    "FactChecking": "Answer concisely: give the specific value asked for, or Yes/No / True/False for a "
                    'yes-no question. End your response with "Final Answer: <your answer>".',
    "NumericalReasoning": "Work out the number from the table. End your response with "
                          '"Final Answer: <your numerical answer>".',
    "DataAnalysis": 'Analyse the table to answer the question. End your response with "Final Answer: '
                    '<your detailed answer>".',
}


def build_prompt(item: dict[str, Any]) -> str:
    """Prompt for one item.

    A published TableBench row's ``instruction`` is the whole prompt (answer-format rules, the table
    and the question); TableBench's own ``inference/infer.py`` sends it verbatim, and so does ftagent
    (the reference fork appended the table and the question a second time). Rows whose instruction
    lacks the question (hand-made items) get the assembled prompt: instruction, table, question and
    a ``qtype``-specific closing line (or the chart-code prompt).
    """
    instruction = str(item.get("instruction") or "")
    question = str(item.get("question") or "")
    if question and question.strip() in instruction:
        return instruction
    if item.get("qtype") == "Visualization":
        return "\n".join([
            "Write Python code that draws the requested chart from the table.",
            f"Table:\n{item['table']}", f"Question: {question}", f"Instructions: {instruction}",
            "The table is saved as table.csv. Start from this skeleton:",
            "```python\nimport pandas as pd\nimport matplotlib.pyplot as plt\ndf = pd.read_csv('table.csv')\n"
            "# build the chart with plt.bar / plt.plot / plt.scatter\nplt.show()\n```",
            "Reply with the Python code only, in one ```python block.",
        ])
    return (f"{instruction}\nTable:\n{item['table']}\nQuestion: {question}\n"
            f"{_TAILS.get(str(item.get('qtype')), _TAILS['DataAnalysis'])}\nAnswer:")


# ---------------------------------------------------------------- extraction

_MARKER = re.compile(r"Final Answer: (.+)")
_PUNCT = frozenset(string.punctuation)


def final_answer(text: str | None) -> str:
    """The official ``parse_dp_prediction``: the rest of the line after the first ``Final Answer: ``.

    Case-sensitive, one space after the colon, as TableBench's own parser; no marker → ``""`` (the
    output scores 0 and does not count for ``Parse@1``). A reasoning block is dropped first
    (:func:`~.common.strip_think`): a draft answer inside ``<think>`` is not the answer.
    """
    m = _MARKER.search(strip_think(text))
    return m.group(1) if m else ""


def normalise(text: str) -> str:
    """TableBench's ``normalize_answer`` (SQuAD's): lower-case, drop ASCII punctuation, drop the
    articles a/an/the, collapse whitespace. Note it also drops ``.``, ``-``, ``%`` and ``,`` inside
    numbers ("0.85" → "085"); the official metrics compare those normalised strings."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def python_code(text: str | None) -> str | None:
    """The last ```` ```python ```` block, as TableBench's ``parse_python_code``; ``None`` without one.

    Only a fence opened by exactly ```` ```python ```` and a newline counts (an untagged fence or bare
    code does not, as in the official parser); a reasoning block is dropped first.
    """
    blocks = re.findall(r"```python\n(.*?)```", strip_think(text), flags=re.S)
    return blocks[-1] if blocks and blocks[-1] else None


# ---------------------------------------------------------------- metrics (TableBench's definitions)

def _is_number(value: str) -> bool:
    return bool(re.match(r"^-?\d+(\.\d+)?%?$", value.strip()))


def _decimal(value: str) -> Decimal:
    if value.endswith("%"):
        return (Decimal(value.strip("%")) / 100).quantize(Decimal("1.0000"), rounding=ROUND_HALF_UP)
    return Decimal(value)


def _rounded(value: str, places: int) -> str:
    return str(_decimal(value).quantize(Decimal("1." + "0" * places), rounding=ROUND_HALF_UP))


def _part_score(pred: str, ref: str, same_number: Any) -> float:
    """Comma-separated answer parts compared in order, each worth 1/len(parts) (custom_em_metric.py);
    numeric reference parts compared with ``same_number``, others as equal strings."""
    refs, preds = [x.strip() for x in ref.split(",")], [x.strip() for x in pred.split(",")]
    score = 0.0
    for i, r in enumerate(refs[: len(preds)]):
        if not _is_number(r):
            score += (r == preds[i]) / len(refs)
            continue
        try:
            score += bool(same_number(preds[i], r, refs)) / len(refs)
        except (InvalidOperation, ValueError):
            continue
    return score


def _same_rounded(p: str, r: str, refs: list[str]) -> bool:
    if r.endswith("%"):
        return _decimal(r) == _decimal(p)
    numbers = [x for x in refs if _is_number(x) and not x.endswith("%")]
    places = min((len(x.split(".")[-1]) if "." in x else 0) for x in numbers)
    return _rounded(r, places) == _rounded(p, places)


def _within_10(p: str, r: str, _refs: list[str]) -> bool:
    want, got = _decimal(r), _decimal(p)
    return got == want if want == 0 else abs(want - got) / abs(want) <= 10 / 100


def em_score(pred: str, ref: str) -> float:
    """Per-item ``EM`` (0..1) as TableBench's ``compute_em`` on normalised Final Answer and reference."""
    return _part_score(normalise(final_answer(pred)), normalise(ref), _same_rounded)


def em10_score(pred: str, ref: str) -> float:
    """Per-item ``EM_with_error_10`` (0..1): numeric parts within 10 % (``compute_em_with_tolerance``)."""
    return _part_score(normalise(final_answer(pred)), normalise(ref), _within_10)


def rouge_score(pred: str, ref: str) -> float:
    """Per-item ROUGE-L F (0..1) of the normalised Final Answer vs the normalised reference
    (``rouge_score``'s tokens and LCS F-measure, no stemming, as ``evaluate``'s ``rouge``)."""
    return rouge_l(normalise(final_answer(pred)), normalise(ref))


def _parse_rate(predictions: Sequence[str]) -> float:
    return pct(sum(final_answer(p) != "" for p in predictions), len(predictions))


def exact_match_metrics(predictions: Sequence[str], references: Sequence[str]) -> dict[str, Any]:
    """``accuracy`` = ``exact_match`` = mean per-item EM ×100; ``Parse@1`` = % with a Final Answer."""
    score = 100 * mean([em_score(p, r) for p, r in zip(predictions, references, strict=True)])
    return {"accuracy": score, "exact_match": score, "Parse@1": _parse_rate(predictions)}


def numeric_metrics(predictions: Sequence[str], references: Sequence[str]) -> dict[str, Any]:
    """``accuracy`` = ``EM_with_error_10`` = mean per-item ±10 % score ×100."""
    score = 100 * mean([em10_score(p, r) for p, r in zip(predictions, references, strict=True)])
    return {"accuracy": score, "EM_with_error_10": score}


def data_analysis_metrics(predictions: Sequence[str], items: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Each item scored once, by its qsubtype (``eval_tablebench_script.py``): Correlation/Trend/
    Statistical analysis ``EM_with_error_10``, ImpactAnalysis ``EM``, the rest ``ROUGE-L``.
    ``accuracy`` = mean per-item score ×100 = the official ``Mix_Metric`` (count-weighted mean).
    Unlike the reference fork, no item is scored twice (its ``analysis_other`` re-scored every
    DataAnalysis item with ROUGE-L)."""
    groups: dict[str, list[float]] = {"numeric": [], "impact": [], "rouge": []}
    for pred, item in zip(predictions, items, strict=True):
        sub, ref = item.get("qsubtype"), str(item["answer"])
        if sub in NUMERIC_ANALYSIS:
            groups["numeric"].append(100 * em10_score(pred, ref))
        elif sub == "ImpactAnalysis":
            groups["impact"].append(100 * em_score(pred, ref))
        else:
            groups["rouge"].append(100 * rouge_score(pred, ref))
    every = groups["numeric"] + groups["impact"] + groups["rouge"]
    return {"accuracy": mean(every), "EM_with_error_10": mean(groups["numeric"]),
            "exact_match": mean(groups["impact"]), "ROUGE-L": mean(groups["rouge"]),
            "Parse@1": _parse_rate(predictions), "n_numeric": len(groups["numeric"]),
            "n_impact": len(groups["impact"]), "n_rouge": len(groups["rouge"])}


def reference_series(answer: str) -> list[list[Any]] | None:
    """The ``y_references = [[...], ...]`` literal of a visualization answer. A missing table value is read
    as NaN, which the chart check equals to NaN: ``np.nan``, as the published rows write it (the official
    parser execs the literal after ``from metrics.chart_metric_utils import *``, which brings numpy as ``np``,
    so it reads it too), and a bare ``nan``, which the official parser cannot read (a NameError: no chart
    passes such an item there; a deliberate difference, docs/benchmarks.md Parity)."""
    m = re.search(r"y_references\s*=\s*(\[.*\])", answer or "", re.DOTALL)
    if not m:
        return None
    try:
        value = ast.literal_eval(m.group(1))
    except (ValueError, SyntaxError):
        try:  # JSON reads NaN; the literal's numbers and brackets are JSON already
            value = json.loads(_NAN.sub("NaN", m.group(1)))
        except ValueError:
            return None
    return value if isinstance(value, list) else None


def _flat(values: list[Any]) -> list[Any]:
    out: list[Any] = []
    for v in values:
        out.extend(v if isinstance(v, list) else [v])
    return out


def series_match(got: list[Any], want: list[Any], chart_type: str = "") -> bool:
    """TableBench's chart check (``compute_general_chart_metric`` / ``compute_pie_chart_metric``):
    both sides flattened one level, rounded to 2 decimals and sorted, then equal (NaN equals NaN);
    for a pie the reference values are first turned into fractions of their total."""
    try:
        ref, pred = _flat(want), _flat(got)
        if chart_type == "pie":
            total = sum(ref)
            ref = [round(r / total, 2) for r in ref]
        ref, pred = sorted(round(r, 2) for r in ref), sorted(round(p, 2) for p in pred)
    except (TypeError, ValueError, ZeroDivisionError):
        return False
    if len(ref) != len(pred):
        return False
    return all(math.isnan(p) if math.isnan(r) else r == p for r, p in zip(ref, pred, strict=True))


def run_chart(code: str, item: dict[str, Any], *, timeout_s: float, memory_mb: int, python: str | None
              ) -> tuple[sandbox.SandboxResult, int]:
    """One answer's chart program in the sandbox, and how many of its runs timed out.

    A run that times out is run once more with :data:`RETRY_FACTOR` times the limit: on a loaded machine
    a right chart took longer than the limit (gold charts scored 80 where the official scores 96; half of
    the failures passed when run again). A program that times out twice is scored as not run (the official
    scorer's verdict for one that exceeds its 15 s) and counted, never silently."""
    chart = str(item.get("chart_type") or "")
    timeouts = 0
    for limit in (timeout_s, timeout_s * RETRY_FACTOR):
        result = sandbox.run_chart_code(code, item.get("table_raw") or {}, timeout_s=limit, memory_mb=memory_mb,
                                        python=python, chart_type=chart)
        if not result.timed_out:
            break
        timeouts += 1
    return result, timeouts


def visualization_metrics(predictions: Sequence[str], items: Sequence[dict[str, Any]], *,
                          timeout_s: float = CHART_LIMIT_S, memory_mb: int = 2048, python: str | None = None
                          ) -> dict[str, Any]:
    """Execute each answer's code in the sandbox (:func:`run_chart`: once, again after a timeout).
    ``Parse@1`` = a ```python block found, ``ECR@1`` = it ran without error, ``Pass@1`` (core) = the
    chart's y values, read from the axes for the item's ``chart_type``, equal ``y_references``
    (:func:`series_match`). ``chart_timeouts`` (answers whose first run timed out) and ``chart_unresolved``
    (timed out again) are present when not 0; ``per_item`` holds each answer's outcome (the evaluator's
    details, so no chart runs twice)."""
    per_item: list[dict[str, Any]] = []
    for pred, item in zip(predictions, items, strict=True):
        code = python_code(pred)
        one: dict[str, Any] = {"Pass@1": 0.0, "ECR@1": 0.0, "Parse@1": 0.0}
        per_item.append(one)
        if code is None:
            continue
        one["Parse@1"] = 100.0
        result, timeouts = run_chart(code, item, timeout_s=timeout_s, memory_mb=memory_mb, python=python)
        if timeouts:
            one["chart_timeouts"] = timeouts
            one["chart_timed_out"] = result.timed_out
        if not result.ok:
            continue
        one["ECR@1"] = 100.0
        want = reference_series(str(item.get("answer", "")))
        chart = str(item.get("chart_type") or "")
        one["Pass@1"] = 100.0 * (want is not None and series_match(result.series, want, chart))
    out: dict[str, Any] = {k: mean([one[k] for one in per_item]) for k in ("Pass@1", "ECR@1", "Parse@1")}
    retried = sum(1 for one in per_item if one.get("chart_timeouts"))
    unresolved = sum(1 for one in per_item if one.get("chart_timed_out"))
    if retried:
        out["chart_timeouts"] = retried
    if unresolved:
        out["chart_unresolved"] = unresolved
    out["per_item"] = per_item
    return out
