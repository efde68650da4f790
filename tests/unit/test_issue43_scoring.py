"""Issue 43, "Scoring leftovers (real public files)": the unit-level half (the parity half runs the official
scorers in the tool env, ``tests/parity``). Each test fails on d350dfe."""

from __future__ import annotations

import math
from pathlib import Path

from ftagent.benchmarks.domain import tablebench as tb

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "benchmarks" / "tablebench"
LINE_CODE = ("```python\n{pre}import pandas as pd\nimport matplotlib.pyplot as plt\ndf = pd.read_csv('table.csv')\n"
             "plt.plot(df['Year'], df['Attendance'], marker='o')\nplt.show()\n```")
NAN_ITEM = {"qtype": "Visualization", "chart_type": "line", "answer": "y_references = [[41.5, np.nan, 38.25, 44.0]]",
            "table_raw": {"columns": ["Year", "Attendance"], "data": [[2001, 41.5], [2002, None], [2003, 38.25],
                                                                      [2004, 44.0]]}}


def test_tablebench_reads_np_nan_in_a_reference_as_the_official_scorer_does():
    # the published NaN row writes np.nan; the official parser execs it with numpy as np in scope
    ref = tb.reference_series(NAN_ITEM["answer"])
    assert ref is not None and ref[0][0] == 41.5 and math.isnan(ref[0][1])
    assert tb.series_match([[41.5, float("nan"), 38.25, 44.0]], ref, "line")
    assert math.isnan(tb.reference_series("y_references = [[1, numpy.nan]]")[0][1])
    assert tb.reference_series("y_references = [[1, nan]]") is not None  # the bare form stays read (docs: Parity)
    m = tb.visualization_metrics([LINE_CODE.format(pre="")], [NAN_ITEM], timeout_s=60)
    assert m["Pass@1"] == 100.0  # d350dfe: 0 (the literal did not parse)


def test_a_chart_that_timed_out_is_run_again_and_counted():
    slow = LINE_CODE.format(pre="import time\ntime.sleep(4)\n")  # over the first limit, under the retry's
    m = tb.visualization_metrics([slow], [NAN_ITEM], timeout_s=3)
    assert m["Pass@1"] == 100.0 and m["chart_timeouts"] == 1 and "chart_unresolved" not in m
    assert m["per_item"][0]["chart_timeouts"] == 1 and not m["per_item"][0]["chart_timed_out"]


def test_a_chart_that_times_out_twice_is_unresolved_and_counted():
    m = tb.visualization_metrics(["```python\nwhile True:\n    pass\n```"], [NAN_ITEM], timeout_s=1)
    assert m["Pass@1"] == 0.0 and m["chart_timeouts"] == 1 and m["chart_unresolved"] == 1
    assert m["per_item"][0] == {"Pass@1": 0.0, "ECR@1": 0.0, "Parse@1": 100.0, "chart_timeouts": 2,
                                "chart_timed_out": True}


def test_a_result_with_chart_programs_that_timed_out_twice_is_warned_about_and_not_cached(tmp_path):
    from ftagent.benchmarks import get_benchmark
    from ftagent.core.settings import load_settings
    from ftagent.tools.opencompass.runs import evaluate_splits_of_path
    from tests.helpers.weights import safetensors_bytes
    from tests.unit.test_scoring_defects import _TimedOutVerifications

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(safetensors_bytes(b"weights"))
    (model / "chat_template.jinja").write_text("{{ messages }}")
    settings = load_settings(file_path=tmp_path / "ft", benchmark_limit=4)
    runner, warnings = _TimedOutVerifications(metric="chart_unresolved"), []
    for _ in range(2):
        out = evaluate_splits_of_path(model, None, benchmark=get_benchmark("demo_add"), splits=("validation",),
                                      settings=settings, runner=runner, work_dir=tmp_path / "work",
                                      model_name="builtin/tiny-qwen2", on_warning=warnings.append)
    assert len(runner.inner.runs) == 2 and not out["validation"].cached  # d350dfe: the second run was cached
    assert [w for w in warnings if "chart program(s) timed out twice" in w] == [
        "demo_add/validation: 1 chart program(s) timed out twice (the limit, then four times it): they score as "
        "wrong (details: chart_timed_out), and this result is not cached"] * 2
