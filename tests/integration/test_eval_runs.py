"""Real OpenCompass on CPU with ``FT_BENCHMARK_NUM_RUNS=2`` and ``FT_BENCHMARK_PASS_K=2`` (demo_add).

OpenCompass renames the metric ``accuracy (2 runs average)`` and adds G-Pass@2; the parsed core score
must be the number OpenCompass's own summary reports. The HF backend on CPU decodes greedily, so the
two runs give the same answers: the runs average equals one run's accuracy, and every G-Pass@2 value
is the share of items answered right in both runs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ftagent.benchmarks import get_benchmark
from ftagent.core.settings import load_settings
from ftagent.runners.local import LocalRunner
from ftagent.tools.opencompass import parse
from ftagent.tools.opencompass.evaluator import evaluate_model_path

pytestmark = pytest.mark.integration
LIMIT = 4


def _summary_value(run: Path, metric: str) -> float:
    """The value of ``metric`` in OpenCompass's own text summary (not the csv parse reads)."""
    text = next((run / "summary").glob("summary_*.txt")).read_text(encoding="utf-8")
    row = re.search(rf"^demo_add\S*\s+\S+\s+{re.escape(metric)}\s+gen\s+(\S+)\s*$", text, re.M)
    assert row, f"{metric} not in the summary:\n{text}"
    return float(row.group(1))


def test_two_runs_core_metric_is_the_summary_value(tools_env, tiny_model, tmp_path):
    settings = load_settings(file_path=tmp_path / "ft", benchmark_limit=LIMIT, benchmark_num_runs=2,
                             benchmark_pass_k=2)
    result = evaluate_model_path(tiny_model, None, benchmark=get_benchmark("demo_add"), split="validation", settings=settings,
                                 runner=LocalRunner(tools_env, sandbox="none"), work_dir=tmp_path / "work",
                                 model_name="builtin/tiny-qwen2", timeout=900)
    run = Path(result.run_dir)
    metrics = result.metrics["demo_add"]
    assert "accuracy" not in metrics and "accuracy (2 runs average)" in metrics
    assert result.score is not None
    assert result.score == _summary_value(run, "accuracy (2 runs average)")
    assert metrics["G-Pass@2_1.0"] == _summary_value(run, "G-Pass@2_1.0")
    assert len(parse.read_predictions(run, "validation")["demo_add"]) == 2 * LIMIT  # n × items generations
    assert result.answers is not None and result.answers.items == 2 * LIMIT  # one answer per run
    assert result.answers.wrong == round((1 - result.score / 100) * 2 * LIMIT)
    assert 1 <= len(result.error_samples) <= LIMIT  # greedy runs agree: one sample per wrong item
