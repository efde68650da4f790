"""The evaluate step makes one ``evaluate_splits`` call (one evaluation run for validation + test);
the test split stays report-only (issue 16)."""

from __future__ import annotations

from ftagent.core.errors import ErrorType, StepFailure
from ftagent.core.types import EvalResult, SplitResults
from ftagent.engine.events import read_events
from tests.unit.test_finetune_workflow import _run


class SplitsEvaluator:
    """Answers both splits in one call; ``evaluate`` must not be used."""

    def __init__(self, test_fails: bool = False, validation_fails: bool = False) -> None:
        self.test_fails, self.validation_fails = test_fails, validation_fails
        self.calls: list[tuple[str, ...]] = []

    def evaluate(self, model, split, ctx):
        raise AssertionError("the per-split path must not run: the workflow evaluates both splits at once")

    def evaluate_splits(self, model, ctx, splits=("validation", "test"), *, on_progress=None):
        self.calls.append(tuple(splits))
        out = SplitResults()
        for split in splits:
            failed = self.test_fails if split == "test" else self.validation_fails
            if failed:
                out.failures[split] = StepFailure(stage="evaluate", error_type=ErrorType.EVAL,
                                                  message=f"OpenCompass failed on {split}-secret-item",
                                                  log_tail=f"{split}-secret-item")
            else:
                out.results[split] = EvalResult(benchmark="demo_add", split=split, core_metric="accuracy",
                                                score=50.0 if split == "validation" else 40.0,
                                                error_samples=[{"q": f"{split}-sample"}])
        return out


def test_one_call_for_both_splits(tmp_path):
    evaluator = SplitsEvaluator()
    session, feedback = _run(tmp_path, evaluator=evaluator)
    assert evaluator.calls == [("validation", "test")]
    exp = session.state.trace.get(0)
    assert exp.val_score == 50.0 and exp.test_score == 40.0
    assert "test-sample" not in feedback.seen[0].model_dump_json()
    splits = [e.split for e in read_events(session.events_path) if e.type == "benchmark_result"]
    assert splits == ["validation", "test"]


def test_a_failed_test_split_stays_report_only(tmp_path):
    session, feedback = _run(tmp_path, evaluator=SplitsEvaluator(test_fails=True))
    seen = feedback.seen[0]
    assert seen.failure is None and seen.val_score == 50.0 and "test-secret-item" not in seen.model_dump_json()
    assert session.state.trace.get(0).test_score is None
    warnings = [e.text for e in read_events(session.events_path) if e.type == "message" and e.level == "warning"]
    assert any("test evaluation failed (report only)" in w for w in warnings)


def test_a_failed_validation_split_fails_the_loop(tmp_path):
    _, feedback = _run(tmp_path, evaluator=SplitsEvaluator(validation_fails=True))
    seen = feedback.seen[0]
    assert seen.failure is not None and seen.failure.error_type == ErrorType.EVAL and seen.val_score is None
