"""With FT_BENCHMARK_NUM_RUNS > 1 the feedback counts answers as items × runs, not as items."""

from types import SimpleNamespace

from ftagent.core.types import AnswerProfile
from ftagent.planners.llm.feedback import answer_profile
from tests.unit.test_parse_runs import FIX, SPLIT, parse


def test_the_profile_of_a_two_run_evaluation_knows_its_runs():
    profile = parse.prediction_profile(parse.latest_run(FIX / "runs_passk"), SPLIT)
    assert profile is not None and profile.runs == 2 and profile.items == 8


def test_feedback_says_answers_and_runs():
    two = answer_profile(SimpleNamespace(val_answers=AnswerProfile(items=8, wrong=4, runs=2)))
    assert two.startswith("- 4 of the 8 validation answers (4 items × 2 runs) were scored wrong")
    one = answer_profile(SimpleNamespace(val_answers=AnswerProfile(items=4, wrong=1)))
    assert one.startswith("- 1 of the 4 validation items were scored wrong")
