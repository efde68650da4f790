"""TableBench: loader, Final-Answer extraction, EM / ±10 % / ROUGE-L by hand, chart sandbox."""

from pathlib import Path

import pytest

from ftagent.benchmarks.domain import evaluate_subtask
from ftagent.benchmarks.domain import tablebench as tb

FIX = str(Path(__file__).parents[1] / "fixtures" / "benchmarks" / "tablebench")
GOOD_CODE = ("```python\nimport pandas as pd\nimport matplotlib.pyplot as plt\n"
             "df = pd.read_csv('table.csv')\nplt.bar(df['year'], df['sales'])\nplt.show()\n```")


def test_loader_and_prompts():
    items = tb.load_items(FIX)
    assert len(items) == 5 and items[0]["table"].splitlines()[0] == "year | sales"
    assert "2020 | 120" in items[0]["table"]
    assert tb.load_items(FIX, "visualization")[0]["table_raw"]["columns"] == ["year", "sales"]
    assert tb.build_prompt(items[1]).endswith("numerical answer>\".\nAnswer:")
    assert "table.csv" in tb.build_prompt(items[4])


def test_final_answer_and_em():
    assert tb.final_answer("blah\nFinal Answer: Yes.\nFinal Answer: No") == "Yes."
    assert tb.final_answer("<think>Final Answer: 1</think>just 2") == "just 2"
    # EM normalisation: case and punctuation ignored
    m = tb.exact_match_metrics(["Final Answer: YES!", "final answer: no"], ["Yes", "Yes"])
    assert m["accuracy"] == 50.0


def test_numeric_within_ten_percent_by_hand():
    preds = ["Final Answer: 1,100", "Final Answer: 89%", "Final Answer: 0.0000001", "Final Answer: n/a", "Final Answer: N/A"]
    refs = ["1000", "100", "0", "5", "n/a"]
    # |1100-1000|/1000 = 0.10 -> ok; |89-100|/100 = 0.11 -> no; gold 0 and |1e-7| < 1e-6 -> ok;
    # "n/a" has no number -> string compare vs "5" no; "N/A" vs "n/a" case-insensitive -> ok. 3/5 = 60
    assert tb.numeric_metrics(preds, refs)["EM_with_error_10"] == pytest.approx(60.0)


def test_data_analysis_routes_each_item_once():
    items = [i for i in tb.load_items(FIX, "data_analysis")]  # StatisticalAnalysis 123.33; DataSummary
    preds = ["Final Answer: 123", "Final Answer: sales grew"]
    # item1 numeric: |123-123.33|/123.33 < 0.1 -> 100; item2 ROUGE-L: pred (sales, grew) vs
    # ref (sales, grew, every, year): LCS 2, P=1, R=.5 -> F1 = 2/3 -> 66.67; accuracy = mean = 83.33
    m = evaluate_subtask("tablebench", "data_analysis", preds, items)
    assert m["EM_with_error_10"] == 100.0 and m["ROUGE-L"] == pytest.approx(200 / 3)
    assert m["accuracy"] == pytest.approx(250 / 3)


def test_visualization_pass_and_failures():
    item = tb.load_items(FIX, "visualization")[0]
    preds = [
        GOOD_CODE,                                                   # pass
        GOOD_CODE.replace("df['sales'])", "df['sales'] * 2)"),       # runs, wrong series
        "```python\nwhile True:\n    pass\n```",                      # loops forever -> timeout
        "```python\nraise RuntimeError('boom')\n```",                 # crashes
        "```python\nimport socket\nsocket.create_connection(('1.1.1.1', 80))\n```",  # network blocked
        "I would draw a bar chart.",                                  # no code
    ]
    # Parse@1 = 5/6, ECR@1 = 2/6, Pass@1 = 1/6
    m = tb.visualization_metrics(preds, [item] * len(preds), timeout_s=3)
    assert m["Parse@1"] == pytest.approx(500 / 6)
    assert m["ECR@1"] == pytest.approx(200 / 6)
    assert m["Pass@1"] == pytest.approx(100 / 6)


def test_sandbox_memory_limit():
    from ftagent.benchmarks.domain import sandbox

    res = sandbox.run_chart_code("x = bytearray(3 * 1024**3)", {"columns": ["a"], "data": [[1]]},
                                 memory_mb=512, timeout_s=10)
    assert not res.ok and "MemoryError" in res.error
    assert tb.series_match([[1.004, "a"]], [[1, "a"]]) and not tb.series_match([[1.02]], [[1]])
