"""Prompt templates: they render, refuse missing variables, and never carry test data."""

from __future__ import annotations

import jinja2
import pytest

from ftagent.core.errors import ErrorType, StepFailure
from ftagent.core.settings import FTSettings, LLMSettings, PathSettings, Settings
from ftagent.core.trace import Experiment, Trace
from ftagent.core.types import EvalResult, Hypothesis, ScenarioInfo
from ftagent.planners.llm.propose import build_proposal_messages, planner_view
from ftagent.planners.llm.templates import PROMPTS_DIR, clip, render, sample_loss_history

TEST_SCORE = 0.918273
BASELINE_TEST = 0.827364


def _scenario() -> ScenarioInfo:
    return ScenarioInfo(benchmark="demo", benchmark_description="add two numbers", base_model="builtin/tiny",
                        base_model_path="/m", file_path="/f", workspace_root="/w",
                        baseline=EvalResult(benchmark="demo", split="validation", core_metric="accuracy", score=0.1))


def _trace() -> Trace:
    trace = Trace(core_metric="accuracy", baseline_val=0.1, baseline_test=BASELINE_TEST)
    trace.record(Experiment(loop=0, hypothesis=Hypothesis(hypothesis="first idea"), val_score=0.4,
                            test_score=TEST_SCORE, decision=True, reason="better than baseline"))
    trace.record(Experiment(loop=1, parent=0, hypothesis=Hypothesis(hypothesis="second idea"),
                            failure=StepFailure(stage="train", error_type=ErrorType.OOM, message="CUDA OOM")))
    trace.record(Experiment(loop=2, parent=0, hypothesis=Hypothesis(hypothesis="third idea"), val_score=0.35,
                            test_score=TEST_SCORE, reason="worse"))
    return trace


def test_every_template_renders_with_strict_undefined():
    names = sorted(p.stem for p in PROMPTS_DIR.glob("*.j2"))
    assert names == ["config_coder", "data_coder", "feedback_error", "feedback_success",
                     "proposal_system", "proposal_user"]
    with pytest.raises(jinja2.UndefinedError):
        render("proposal_system", scenario_text="x")  # has_parent and upper_data_size_limit missing


def test_proposal_messages_show_parent_siblings_and_no_test_data():
    settings = Settings(FTSettings(), LLMSettings(), PathSettings())
    messages = build_proposal_messages(_scenario(), planner_view(_trace()), settings)
    system, user = messages[0]["content"], messages[1]["content"]
    assert "skip_data_processing" in system and "2000" in system
    assert "loop 0" in user and "0.4" in user
    assert "second idea" in user and "train/OOM" in user and "third idea" in user and "❌" in user
    text = system + user
    assert str(TEST_SCORE) not in text and str(BASELINE_TEST) not in text


def test_planner_view_has_no_test_fields():
    view = planner_view(_trace())
    dumped = view.model_dump_json()
    assert "test" not in dumped and str(TEST_SCORE) not in dumped
    assert [e.loop for e in view.siblings(0)] == [1, 2] and view.incumbent() == (0, 0.4)


def test_first_proposal_without_parent():
    settings = Settings(FTSettings(), LLMSettings(), PathSettings())
    messages = build_proposal_messages(_scenario(), planner_view(Trace(baseline_val=0.2)), settings)
    assert "from scratch" in messages[1]["content"] and "0.2" in messages[1]["content"]
    assert "skip_data_processing\" to true only" not in messages[0]["content"]


def test_error_feedback_template():
    failure = StepFailure(stage="validate", error_type=ErrorType.CONFIG, message="unknown key foo",
                          log_tail="Traceback ... KeyError: foo", suggestion="remove foo")
    text = render("feedback_error", scenario_text="s", loop=3, hypothesis="h", task="t", config="a: 1",
                  failure=failure)
    assert "validate" in text and "CONFIG" in text and "KeyError: foo" in text and "remove foo" in text


def test_sample_loss_history():
    points = [{"step": i, "loss": 1.0 / (i + 1)} for i in range(100)]
    sampled = sample_loss_history(points)
    assert len(sampled) == 60
    assert sampled[:30] == points[:30] and sampled[30:] == points[70:]
    assert sample_loss_history(points[:60]) == points[:60]
    assert sample_loss_history(points[:61]) == points[:30] + points[31:61]
    assert sample_loss_history([]) == []


def test_clip_keeps_head_and_tail():
    text = "a" * 50 + "b" * 50
    out = clip(text, 20)
    assert out.startswith("a" * 10) and out.endswith("b" * 10) and "80 characters cut" in out
    assert clip("short", 20) == "short" and clip(None) == ""
