"""Recompute ``reference/tablebench.json``: TableBench's official scoring code on the parity corpora.

Usage (the official code is never copied here; it is imported from local checkouts)::

    git clone https://github.com/TableBench/TableBench /tmp/tablebench
    git clone https://github.com/huggingface/evaluate /tmp/evaluate     # metrics/rouge, read offline
    python -m venv /tmp/offvenv && /tmp/offvenv/bin/pip install pandas numpy matplotlib \
        "datasets<3" evaluate rouge_score wrapt_timeout_decorator
    FTAGENT_OFFICIAL_TABLEBENCH=/tmp/tablebench FTAGENT_OFFICIAL_EVALUATE=/tmp/evaluate \
        MPLBACKEND=Agg /tmp/offvenv/bin/python tests/parity/official_tablebench.py [--write]

Per output, as the official pipeline does: ``parse_tablebench_instruction_response_script.py``'s
``parse_dp_prediction`` (``Final Answer: (.+)``), then ``metrics/qa_metrics.py:QAMetric.compute`` on
the one (reference, parsed prediction) pair: ``EM``, ``EM_with_error_10`` and ``ROUGE-L`` (×100);
the metric the official tables use for the item's qtype/qsubtype is ``eval_tablebench_script.py``'s
mapping (FactChecking/NumericalReasoning/ImpactAnalysis EM; Correlation/Trend/Statistical analysis
EM_with_error_10; other DataAnalysis ROUGE-L). ``evaluate.load('rouge')`` is pointed at the
``metrics/rouge`` folder of the evaluate checkout (the Hub is not reachable here).

Visualization: the parse script's own ``pre_save_table_to_csv`` and ``parse_chart_code_then_exec``
(run in a scratch folder, with the module's ``__name__`` set to ``"__main__"`` as when the script is
run, since it wraps the answer in ``if __name__ == '__main__':``), which execs the answer, then the
answer + ``y_references`` + its chart getters; ``parsed_prediction is True`` is ``Pass@1``,
``ecr_1`` is ``ECR@1``. Run with ``MPLBACKEND=Agg`` (no display), as any headless scorer runs.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CORPORA = HERE / "corpora"
REFERENCE = HERE / "reference" / "tablebench.json"
TEXT_KEYS = ("tablebench_fact_checking", "tablebench_numerical_reasoning", "tablebench_data_analysis")
VIS_KEY = "tablebench_visualization"
REPO = "TableBench/TableBench"
NUMERIC_ANALYSIS = ("CorrelationAnalysis", "TrendForecasting", "StatisticalAnalysis")


def official_metric(qtype: str, qsubtype: str) -> str:
    """The metric ``eval_tablebench_script.py:save_subtype_results_to_csv`` reports for a sub-type."""
    if qtype in ("FactChecking", "NumericalReasoning") or qsubtype == "ImpactAnalysis":
        return "EM"
    return "EM_with_error_10" if qsubtype in NUMERIC_ANALYSIS else "ROUGE-L"


def _engine(checkout: Path, evaluate_checkout: Path) -> tuple[Any, Any]:
    sys.path.insert(0, str(checkout))
    import evaluate  # noqa: PLC0415 - the official venv's package

    original = evaluate.load

    def local_load(name: str, *args: Any, **kwargs: Any) -> Any:
        path = evaluate_checkout / "metrics" / name
        return original(str(path) if path.is_dir() else name, *args, **kwargs)

    evaluate.load = local_load
    import parse_tablebench_instruction_response_script as parse  # noqa: PLC0415
    from metrics.qa_metrics import QAMetric  # noqa: PLC0415 - from the official checkout

    return QAMetric(), parse


def compute(checkout: Path, evaluate_checkout: Path) -> dict[str, Any]:
    """Score the text corpora of :data:`TEXT_KEYS` with the official code of ``checkout``."""
    engine, parse = _engine(checkout, evaluate_checkout)
    commit = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    result: dict[str, Any] = {
        "repo": REPO, "commit": commit,
        "scorers": {"parse": "parse_tablebench_instruction_response_script.py:parse_dp_prediction",
                    "metric": "metrics/qa_metrics.py:QAMetric.compute (+ metrics/custom_em_metric.py)",
                    "mapping": "eval_tablebench_script.py:save_subtype_results_to_csv"},
        "how": "tests/parity/official_tablebench.py: parse_dp_prediction(output), then QAMetric().compute("
               "[answer], [parsed]) per output; evaluate.load('rouge') from huggingface/evaluate "
               "metrics/rouge (use_aggregator on one pair = that pair's score)",
        "keys": {},
    }
    for key in TEXT_KEYS:
        cases = json.loads((CORPORA / f"{key}.json").read_text(encoding="utf-8"))
        scores = []
        for case in cases:
            item = case["item"]
            parsed = parse.parse_dp_prediction(case["output"])
            m = engine.compute(references=[item["answer"]], predictions=[parsed])
            metric = official_metric(item["qtype"], item["qsubtype"])
            scores.append({"parsed": parsed, "metric": metric, "score": m[metric], "EM": m["EM"],
                           "EM_with_error_10": m["EM_with_error_10"], "ROUGE-L": m["ROUGE-L"]})
        result["keys"][key] = scores
    result["keys"][VIS_KEY] = _visualization(parse)
    return result


def _visualization(parse: Any) -> list[dict[str, Any]]:
    """Pass@1 / ECR@1 per output with the official parse script's chart path."""
    import tempfile  # noqa: PLC0415

    parse.__dict__["__name__"] = "__main__"  # as `python parse_tablebench_instruction_response_script.py`
    cases = json.loads((CORPORA / f"{VIS_KEY}.json").read_text(encoding="utf-8"))
    scores, cwd = [], os.getcwd()
    for case in cases:
        item = case["item"]
        sample = {"answer": item["answer"], "chart_type": item["chart_type"], "prediction": case["output"],
                  "table": item["table"]}
        with tempfile.TemporaryDirectory() as tmp:
            os.chdir(tmp)
            try:
                parse.pre_save_table_to_csv(item["table"])
                pred, ecr = parse.parse_chart_code_then_exec(sample)
            finally:
                os.chdir(cwd)
        scores.append({"pass": pred is True, "ecr": bool(ecr), "parse": pred != ""})
    return scores


def main() -> int:
    checkout, ev = os.environ.get("FTAGENT_OFFICIAL_TABLEBENCH"), os.environ.get("FTAGENT_OFFICIAL_EVALUATE")
    if not checkout or not ev:
        print("set FTAGENT_OFFICIAL_TABLEBENCH (TableBench/TableBench) and FTAGENT_OFFICIAL_EVALUATE "
              "(huggingface/evaluate) to local checkouts", file=sys.stderr)
        return 2
    with contextlib.redirect_stdout(io.StringIO()):
        data = compute(Path(checkout), Path(ev))
    # tests/parity/harness.py (stdlib only): this script's folder is on sys.path
    from harness import publish_reference

    return publish_reference(REFERENCE, data)


if __name__ == "__main__":
    raise SystemExit(main())
