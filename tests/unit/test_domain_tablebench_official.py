"""TableBench against its real published rows and its official definitions.

Rows: ``tests/fixtures/benchmarks/tablebench/TableBench_DP_sample.jsonl`` (real, see its README).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ftagent.benchmarks.domain import evaluate_subtask
from ftagent.benchmarks.domain import tablebench as tb

FIX = str(Path(__file__).parents[1] / "fixtures" / "benchmarks" / "tablebench")
SAMPLE = "TableBench_DP_sample.jsonl"


def test_real_rows_load_with_the_published_fields():
    items = tb.load_items(FIX, filename=SAMPLE)
    assert [i["qtype"] for i in items] == ["FactChecking", "NumericalReasoning", "DataAnalysis", "DataAnalysis",
                                           "Visualization"]
    for item in items:
        assert set(item["table_raw"]) == {"columns", "data"} and isinstance(item["answer"], str)
    assert tb.load_items(FIX, "visualization", filename=SAMPLE)[0]["chart_type"] == "bar"


def test_prompt_is_the_published_instruction_verbatim():
    # the real instruction already holds the answer format, the table and the question (TableBench's
    # inference/infer.py sends it as the user turn); the old prompt repeated table and question
    for item in tb.load_items(FIX, filename=SAMPLE):
        prompt = tb.build_prompt(item)
        assert prompt == item["instruction"]
        assert prompt.count(item["question"]) == 1


def test_hand_made_rows_still_get_the_assembled_prompt():
    item = tb.load_items(FIX)[1]
    assert tb.build_prompt(item).endswith('numerical answer>".\nAnswer:')


@pytest.mark.parametrize(("pred", "want"), [
    ("Final Answer: 12 de octubre", 100.0),
    ("Final Answer: The 12 de Octubre.", 100.0),   # article, case and punctuation dropped (official)
    ("12 de octubre", 0.0),                        # no "Final Answer: " line -> nothing parsed
    ("final answer: 12 de octubre", 0.0),          # the official marker is case-sensitive
])
def test_fact_checking_real_row(pred, want):
    item = tb.load_items(FIX, "fact_checking", filename=SAMPLE)[0]
    assert evaluate_subtask("tablebench", "fact_checking", [pred], [item])["accuracy"] == want


def test_impact_analysis_real_row_needs_both_factors_in_order():
    item = tb.load_items(FIX, filename=SAMPLE)[3]   # answer "infiltration, surface run off"
    score = evaluate_subtask("tablebench", "data_analysis", ["Final Answer: Infiltration, surface run-off"], [item])
    assert score["exact_match"] == 0.0              # "surface runoff" != "surface run off" after normalising
    assert evaluate_subtask("tablebench", "data_analysis", ["Final Answer: infiltration, surface run off"],
                            [item])["exact_match"] == 100.0
