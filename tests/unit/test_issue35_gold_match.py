"""Issue 35 (relay critique), item 6: a result whose wrong-scored outputs equal their golds is a probable
evaluation error (scorer or answer format), said in the feedback prompt and recorded by the workflow."""

from __future__ import annotations

from ftagent.core.trace import Trace
from ftagent.core.types import AnswerProfile
from ftagent.planners.llm.preview import preview
from tests.helpers.prompt_view import fixed_machine, scored, text_of  # noqa: F401 (fixed_machine: autouse)
from tests.unit.test_prompts import _demo_scenario, _settings

# --- 6. outputs equal to their golds: a probable evaluation error ------------------------------------------

RIGHT_BUT_WRONG = [{"dataset": "demo_add", "question": f"HUMAN: What is {a} + 10?", "gold": str(a + 10),
                    "model_output": f"\\boxed{{{a + 10}}}" if a % 2 else f"{a + 10}"} for a in range(20, 26)]


def test_gold_matches_needs_a_clear_majority_of_equal_outputs():
    from ftagent.core.gold_match import gold_matches, normalise_answer

    assert normalise_answer("\\boxed{1,234}") == normalise_answer(" 1234. ") == "1234"
    found = gold_matches(RIGHT_BUT_WRONG)
    assert found.matched == 6 and "3 of them hold it inside \\boxed{}, 3 are the bare answer" in found.text()
    chatty = [{"gold": "42", "model_output": "The answer is 42."}] * 5  # the model's own format problem
    assert gold_matches(chatty) is None
    assert gold_matches(RIGHT_BUT_WRONG[:2] + [{"gold": "1", "model_output": "2"}] * 2) is None  # no majority


def test_a_zero_score_whose_outputs_equal_the_golds_is_flagged_as_an_evaluation_error(tmp_path):
    scenario = _demo_scenario(tmp_path)
    trace = Trace(core_metric="accuracy", baseline_val=0.0)
    trace.record(scored(0, 0.0, error_samples=RIGHT_BUT_WRONG,
                         val_answers=AnswerProfile(items=100, wrong=100, top={})))
    fb = text_of(preview("feedback", scenario, _settings(), trace))
    assert "⚠️ Probable EVALUATION error, not a model failure" in fb
    assert "6 of the 6 wrong-scored validation items shown have a model output equal to the gold" in fb
    assert "do not read it as under-training" in fb and "explain the\nscore as an evaluation" in fb
    honest = Trace(core_metric="accuracy", baseline_val=0.0)
    honest.record(scored(0, 0.0, error_samples=[{"gold": "30", "model_output": "\\boxed{31}"}] * 4))
    assert "EVALUATION error" not in text_of(preview("feedback", scenario, _settings(), honest))


def test_the_workflow_records_outputs_equal_to_golds_as_a_warning(tmp_path):
    from ftagent.core.types import EvalResult, SplitResults
    from ftagent.engine.events import read_events
    from tests.unit.test_finetune_workflow import _run

    class RightButWrong:
        def evaluate_splits(self, model, ctx, splits=("validation", "test"), *, on_progress=None):
            return SplitResults(results={s: EvalResult(benchmark="demo_add", split=s, core_metric="accuracy",
                                                       score=0.0, error_samples=RIGHT_BUT_WRONG) for s in splits})

    session, _ = _run(tmp_path, evaluator=RightButWrong())
    warnings = [e.text for e in read_events(session.events_path) if e.type == "message" and e.level == "warning"]
    assert any("loop 0 validation: 6 of the 6" in w and "probable evaluation error" in w for w in warnings), warnings
