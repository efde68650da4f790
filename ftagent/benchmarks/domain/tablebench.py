"""TableBench: loader, prompts, "Final Answer:" extraction and metrics (EM, ±10 %, ROUGE-L, charts).

Data: HF ``Multilingual-Multimodal-NLP/TableBench``, file ``TableBench_TCoT.jsonl`` (fields ``id``,
``qtype``, ``qsubtype``, ``instruction``, ``table`` {columns, data}, ``question``, ``answer``,
``chart_type``). Visualization answers are executed by :mod:`.sandbox`. Standard library only.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Sequence
from typing import Any

from . import sandbox
from .common import as_obj, fenced_blocks, mean, pct, read_records, rouge_l, strip_think

QTYPES = {"fact_checking": "FactChecking", "numerical_reasoning": "NumericalReasoning",
          "data_analysis": "DataAnalysis", "visualization": "Visualization"}
NUMERIC_ANALYSIS = ("CorrelationAnalysis", "TrendForecasting", "StatisticalAnalysis")
DEFAULT_FILE = "TableBench_TCoT.jsonl"


# ---------------------------------------------------------------- loader and prompts

def table_text(table: dict[str, Any]) -> str:
    """``c1 | c2`` header, a dashed line, then one `` | ``-joined line per row."""
    header = " | ".join(str(c) for c in table.get("columns", []))
    rows = [" | ".join(str(v) for v in row) for row in table.get("data", [])]
    return "\n".join([header, "-" * max(3, len(header))] + rows)


def load_items(root: str, qtype: str | None = None, filename: str = DEFAULT_FILE) -> list[dict[str, Any]]:
    """Items of ``<root>/<filename>`` (``qtype`` = a key of :data:`QTYPES` or a raw qtype); each
    gains ``table_raw`` (the dict) and ``table`` (plain text)."""
    wanted = QTYPES.get(qtype, qtype) if qtype else None
    items = []
    for row in read_records(os.path.join(root, filename)):
        if wanted and row.get("qtype") != wanted:
            continue
        item = dict(row)
        raw = as_obj(row.get("table")) or {}
        item["table_raw"], item["table"] = raw, table_text(raw)
        item["answer"] = "" if row.get("answer") is None else str(row["answer"])
        items.append(item)
    return items


_TAILS = {
    "FactChecking": "Answer concisely: give the specific value asked for, or Yes/No / True/False for a "
                    'yes-no question. End your response with "Final Answer: <your answer>".',
    "NumericalReasoning": "Work out the number from the table. End your response with "
                          '"Final Answer: <your numerical answer>".',
    "DataAnalysis": 'Analyse the table to answer the question. End your response with "Final Answer: '
                    '<your detailed answer>".',
}


def build_prompt(item: dict[str, Any]) -> str:
    """Prompt for one item; the ``qtype`` picks the closing instruction (or the chart-code prompt)."""
    qtype = item.get("qtype")
    if qtype == "Visualization":
        return "\n".join([
            "Write Python code that draws the requested chart from the table.",
            f"Table:\n{item['table']}", f"Question: {item['question']}", f"Instructions: {item.get('instruction', '')}",
            "The table is saved as table.csv. Start from this skeleton:",
            "```python\nimport pandas as pd\nimport matplotlib.pyplot as plt\ndf = pd.read_csv('table.csv')\n"
            "# build the chart with plt.bar / plt.plot / plt.scatter\nplt.show()\n```",
            "Reply with the Python code only, in one ```python block.",
        ])
    return (f"{item.get('instruction', '')}\nTable:\n{item['table']}\nQuestion: {item['question']}\n"
            f"{_TAILS.get(qtype, _TAILS['DataAnalysis'])}\nAnswer:")


# ---------------------------------------------------------------- extraction

def final_answer(text: str | None) -> str:
    """Text after the first ``Final Answer:`` up to the end of that line (else the whole text)."""
    text = strip_think(text)
    m = re.search(r"final answer\s*:\s*(.*)", text, re.IGNORECASE)
    return (m.group(1) if m else text).strip()


def normalise(text: str) -> str:
    """Lower-case; non-word, non-space characters → space; collapse whitespace."""
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def python_code(text: str | None) -> str | None:
    """The last ```python block (else the last fence), or the whole text if it looks like code."""
    text = strip_think(text)
    blocks = fenced_blocks(text)
    py = [b for lang, b in blocks if lang in ("python", "py")] or [b for _lang, b in blocks]
    if py:
        return py[-1]
    if re.search(r"\b(import|plt|pandas|pd|df|numpy)\b", text):
        return text
    return None


def first_number(text: str) -> float | None:
    """First number in ``text`` after removing commas and ``%``."""
    m = re.search(r"-?\d+\.?\d*", text.replace(",", "").replace("%", ""))
    return float(m.group(0)) if m else None


# ---------------------------------------------------------------- metrics

def _em(pred: str, ref: str) -> bool:
    return normalise(final_answer(pred)) == normalise(final_answer(ref))


def _within_10(pred: str, ref: str) -> bool:
    p_txt, r_txt = final_answer(pred), final_answer(ref)
    p, r = first_number(p_txt), first_number(r_txt)
    if p is None or r is None:
        return p_txt.strip().lower() == r_txt.strip().lower()
    if r == 0:
        return abs(p) < 1e-6
    return abs(p - r) / abs(r) <= 0.10


def exact_match_metrics(predictions: Sequence[str], references: Sequence[str]) -> dict[str, Any]:
    """``accuracy`` = ``exact_match`` = % normalised Final-Answer equality."""
    score = pct(sum(_em(p, r) for p, r in zip(predictions, references, strict=True)), len(predictions))
    return {"accuracy": score, "exact_match": score}


def numeric_metrics(predictions: Sequence[str], references: Sequence[str]) -> dict[str, Any]:
    """``accuracy`` = ``EM_with_error_10``: first numbers within 10 % relative error (gold 0 needs
    |pred| < 1e-6); when either side has no number, case-insensitive string equality."""
    score = pct(sum(_within_10(p, r) for p, r in zip(predictions, references, strict=True)), len(predictions))
    return {"accuracy": score, "EM_with_error_10": score}


def rouge_metrics(predictions: Sequence[str], references: Sequence[str]) -> dict[str, Any]:
    """``ROUGE-L`` F1 ×100 (LCS on lower-cased alphanumeric tokens), Final Answer vs full reference."""
    score = 100 * mean([rouge_l(final_answer(p), r) for p, r in zip(predictions, references, strict=True)])
    return {"ROUGE-L": score, "accuracy": score}


def data_analysis_metrics(predictions: Sequence[str], items: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Each item scored once, by its qsubtype: numeric subtypes ±10 %, ImpactAnalysis EM, the rest
    ROUGE-L. ``accuracy`` = mean per-item score (0/100 or ROUGE-L ×100). Unlike the fork, no item is
    scored twice (its ``analysis_other`` re-scored every DataAnalysis item with ROUGE-L)."""
    groups: dict[str, list[float]] = {"numeric": [], "impact": [], "rouge": []}
    for pred, item in zip(predictions, items, strict=True):
        sub, ref = item.get("qsubtype"), str(item["answer"])
        if sub in NUMERIC_ANALYSIS:
            groups["numeric"].append(100.0 * _within_10(pred, ref))
        elif sub == "ImpactAnalysis":
            groups["impact"].append(100.0 * _em(pred, ref))
        else:
            groups["rouge"].append(100 * rouge_l(final_answer(pred), ref))
    every = groups["numeric"] + groups["impact"] + groups["rouge"]
    return {"accuracy": mean(every), "EM_with_error_10": mean(groups["numeric"]),
            "exact_match": mean(groups["impact"]), "ROUGE-L": mean(groups["rouge"]),
            "n_numeric": len(groups["numeric"]), "n_impact": len(groups["impact"]), "n_rouge": len(groups["rouge"])}


def reference_series(answer: str) -> list[list[Any]] | None:
    """The ``y_references = [[...], ...]`` literal of a visualization answer."""
    m = re.search(r"y_references\s*=\s*(\[.*\])", answer or "", re.DOTALL)
    try:
        value = ast.literal_eval(m.group(1)) if m else None
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, list) else None


def series_match(got: list[list[Any]], want: list[list[Any]], tol: float = 0.01) -> bool:
    """Same number of series and lengths; numbers within ``tol`` absolute, other values equal."""
    if len(got) != len(want):
        return False
    for g_series, w_series in zip(got, want, strict=True):
        if len(g_series) != len(w_series):
            return False
        for g, w in zip(g_series, w_series, strict=True):
            if isinstance(w, (int, float)) and isinstance(g, (int, float)):
                if abs(float(g) - float(w)) > tol:
                    return False
            elif g != w:
                return False
    return True


def visualization_metrics(predictions: Sequence[str], items: Sequence[dict[str, Any]], *,
                          timeout_s: float = 10.0, memory_mb: int = 2048, python: str | None = None
                          ) -> dict[str, Any]:
    """Execute each answer's code in the sandbox. ``Parse@1`` = code found, ``ECR@1`` = ran without
    error, ``Pass@1`` (core) = recorded bar/plot/scatter y series equal the reference series."""
    parsed = ran = passed = 0
    for pred, item in zip(predictions, items, strict=True):
        code = python_code(pred)
        if code is None:
            continue
        parsed += 1
        result = sandbox.run_chart_code(code, item.get("table_raw") or {}, timeout_s=timeout_s,
                                        memory_mb=memory_mb, python=python)
        if not result.ok:
            continue
        ran += 1
        want = reference_series(str(item.get("answer", "")))
        passed += want is not None and series_match(result.series, want)
    n = len(predictions)
    return {"Pass@1": pct(passed, n), "ECR@1": pct(ran, n), "Parse@1": pct(parsed, n)}
