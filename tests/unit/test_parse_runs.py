"""parse on real OpenCompass 0.5.4 output with several runs (``n``) and pass@k (``k``).

The fixtures are described in tests/fixtures/opencompass/README.md: a real greedy 2-run evaluation
and the same predictions, rewritten so that the runs differ, scored again by OpenCompass with n=2, k=2.
"""

from pathlib import Path

import pytest

from ftagent.tools.opencompass import parse

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "opencompass"
SPLIT = "validation"


@pytest.fixture
def passk() -> Path:
    return parse.latest_run(FIX / "runs_passk")


@pytest.fixture
def greedy() -> Path:
    return parse.latest_run(FIX / "runs_greedy")


def test_metric_runs_names():
    assert parse.metric_runs("accuracy (2 runs average)") == ("accuracy", 2)
    assert parse.metric_runs("pass@1 (10 runs average)") == ("pass@1", 10)
    assert parse.metric_runs("accuracy") == ("accuracy", 1)
    assert parse.metric_runs("G-Pass@2_0.5") == ("G-Pass@2_0.5", 1)


def test_core_value_prefers_the_exact_name():
    assert parse.core_value({"accuracy": 1.0, "accuracy (2 runs average)": 2.0}, "accuracy") == 1.0
    assert parse.core_value({"accuracy (2 runs average)": 2.0}, "accuracy") == 2.0
    assert parse.core_value({"score (2 runs average)": 2.0}, "accuracy") is None


def test_runs_average_is_the_core_metric(passk):
    metrics = parse.read_metrics(passk, SPLIT)
    m = metrics["demo_add"]
    # what OpenCompass's summary says, read from its markdown (not the csv parse reads)
    md = next((passk / "summary").glob("*.md")).read_text(encoding="utf-8")
    assert "| accuracy (2 runs average) | gen | 50.00 |" in md
    assert m["accuracy (2 runs average)"] == 50.0
    assert m["G-Pass@2_0.0"] == 75.0 and m["G-Pass@2_1.0"] == 25.0 and m["mG-Pass@2"] == 25.0
    assert parse.core_score(metrics, "accuracy") == 50.0  # None before runs were read
    assert parse.core_score(metrics, "G-Pass@2_0.0") == 75.0  # a pass@k metric named as the core one


def test_each_run_is_one_answer(passk):
    profile = parse.prediction_profile(passk, SPLIT)
    # 4 items x 2 runs; 4 wrong answers: 1 - 4/8 = the runs average (50 %)
    assert profile is not None and (profile.items, profile.wrong) == (8, 4)
    assert profile.top == {"133": 2, "7": 2}


def test_error_samples_are_the_wrong_runs(passk):
    samples = parse.error_samples(passk, max_samples=100, split=SPLIT)
    by_gold = sorted((s["gold"], s["model_output"]) for s in samples)
    # item 0 is wrong in run 2 only: its sample is run 2's answer, never run 1's right one;
    # item 3 gave the same wrong answer twice: one sample
    assert by_gold == [("104", "\\boxed{7}"), ("127", "\n" * 16), ("93", "\\boxed{39}")]
    assert all("What is" in s["question"] for s in samples)


def test_greedy_runs_agree(greedy):
    metrics = parse.read_metrics(greedy, SPLIT)
    assert metrics == {"demo_add": {"accuracy (2 runs average)": 0.0}}
    assert parse.core_score(metrics, "accuracy") == 0.0
    profile = parse.prediction_profile(greedy, SPLIT)
    assert (profile.items, profile.wrong) == (8, 8)
    assert len(parse.error_samples(greedy, max_samples=100, split=SPLIT)) == 4  # one per item: the runs agree


def test_one_run_layout_unchanged():
    run = parse.latest_run(FIX / "list_layout")
    profile = parse.prediction_profile(run)
    assert (profile.items, profile.wrong) == (20, 20)
    assert len(parse.error_samples(run, max_samples=100)) == 20
