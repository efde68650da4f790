"""Issue 35: what the LLM planner sees — the failure prompt of a stopped run, the view of a raw user
file, budgets, paths, and the contamination scan of shown items."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftagent.core.errors import ErrorType, StepFailure
from ftagent.core.trace import Experiment, Trace
from ftagent.core.types import Hypothesis
from ftagent.planners.llm import brief
from tests.unit.test_prompts import _demo_scenario, _settings

PROGRESS = (" 80%|████████  | 1600/2000 [01:52<00:28, 14.2it/s]\n"
            " 90%|█████████ | 1800/2000 [02:06<00:14, 14.1it/s]\n"
            "100%|██████████| 2000/2000 [02:20<00:00,  3.21s/it]\n"
            "[ftagent] stopped on request\n")


@pytest.fixture(autouse=True)
def _fixed_machine(monkeypatch):
    monkeypatch.setattr(brief, "cpu_facts", lambda: (2, 24.0))
    monkeypatch.setattr(brief, "dir_size", lambda path: 2_312_345)


def _diverged_trace(tmp_path: Path):
    scenario = _demo_scenario(tmp_path)
    trace = Trace(core_metric="accuracy", baseline_val=0.0)
    history = [{"step": 100 * i, "loss": round(2.0 * 0.7 ** i, 4), "lr": 1e-4} for i in range(1, 21)]
    exp = Experiment(loop=0, hypothesis=Hypothesis(hypothesis="h", task="t"), failure=StepFailure(
        stage="train", error_type=ErrorType.DIVERGED, message="training diverged at step 2000/2000: loss 9",
        log_tail="[INFO] loading model\nValueError: loss exploded in layer 3\n" + PROGRESS,
        details={"loss_history": history}))
    trace.record(exp)
    return scenario, trace, exp


def test_the_failure_prompt_lists_every_reported_type_and_carries_the_loss_table(tmp_path):
    from ftagent.planners.llm.feedback import feedback_messages

    scenario, trace, exp = _diverged_trace(tmp_path)
    fb = feedback_messages(scenario, _settings(), exp, trace, False)[0]["content"]
    choices = fb.split('"error_type": "one of ', 1)[1].split('"', 1)[0]
    for kind in ErrorType:
        assert (kind.value in choices) is (kind is not ErrorType.UNKNOWN), kind
    assert "- Loss curve (sampled):" in fb and "| 2000 | 0.0016 |" in fb  # the stopped run's curve
    assert "ValueError: loss exploded in layer 3" in fb
    assert "it/s]" not in fb and "s/it]" not in fb and "stopped on request" not in fb
