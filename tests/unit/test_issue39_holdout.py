"""Issue 39 item 5: validation's feedback part (may be shown) and selection part (never shown; it alone
decides SOTA with its interval), split by item id from one evaluation.

At d350dfe the whole validation split decided, and the planner was shown its items: a candidate trained on
the shown items, no better on the others, became SOTA on a significant gain.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ftagent.core.holdout import MIN_SELECTION_ITEMS, split_holdout, split_record
from ftagent.core.sota import decide_sota, differences
from ftagent.core.stats import ItemScores
from ftagent.core.trace import Experiment, Trace
from ftagent.core.types import EvalResult

FIXTURES = Path(__file__).parents[1] / "fixtures" / "opencompass"
N = 100


def _record(tmp: Path, name: str, correct: set[int]) -> str:
    rec = ItemScores(benchmark="demo_add", split="validation", core_metric="accuracy",
                     items={"demo_add": {str(i): 1.0 if i in correct else 0.0 for i in range(N)}})
    return str(rec.save(tmp / f"{name}.items.json"))


def test_the_split_is_seeded_sized_by_the_benchmark_and_disjoint():
    h = split_holdout({"demo_add": 100, "aime": 15, "one": 1}, seed=7, share=0.7)
    assert (len(h.selection["demo_add"]), len(h.feedback["demo_add"])) == (70, 30)
    assert (len(h.selection["aime"]), len(h.feedback["aime"])) == (10, 5)
    assert h.selection["one"] == ["0"] and h.feedback["one"] == []
    assert not set(h.selection["demo_add"]) & set(h.feedback["demo_add"])
    assert split_holdout({"demo_add": 100}, seed=7, share=0.7).selection["demo_add"] == h.selection["demo_add"]
    assert split_holdout({"demo_add": 100}, seed=8, share=0.7).selection["demo_add"] != h.selection["demo_add"]
    small = split_holdout({"aime": 15}, seed=7, share=0.7)
    assert small.size("selection") < MIN_SELECTION_ITEMS and "interval is wide" in small.size_note()
    assert h.size_note() == ""


def _session(tmp: Path, cand_correct: set[int]) -> tuple[Experiment, Trace]:
    holdout = split_holdout({"demo_add": N}, seed=1, share=0.7)
    base_correct = set(range(0, N, 2))  # the base model: every other item (50 %)
    trace = Trace(core_metric="accuracy", baseline_val=50.0, baseline_val_items=_record(tmp, "base", base_correct),
                  holdout=holdout)
    trace.baseline_parts = split_record(trace.baseline_val_items, holdout)
    exp = Experiment(loop=0, val_score=100.0 * len(cand_correct) / N, val_items=_record(tmp, "cand", cand_correct))
    exp.parts = split_record(exp.val_items, holdout)
    exp.intervals = differences(exp, trace)
    return exp, trace


def test_a_candidate_that_learnt_the_shown_items_does_not_become_sota(tmp_path):
    """Right on every feedback item (the ones a planner saw), the base's answers on the selection part."""
    holdout = split_holdout({"demo_add": N}, seed=1, share=0.7)
    shown = {int(i) for i in holdout.feedback["demo_add"]}
    base = set(range(0, N, 2))
    exp, trace = _session(tmp_path, shown | (base - shown))
    whole = next(d for d in exp.intervals if d.split == "validation" and d.against == "baseline")
    assert whole.low > 0  # on the whole split it looks like a significant gain (how d350dfe decided)
    verdict = decide_sota(exp, trace, rule="interval")
    assert verdict.decision is False and verdict.difference.split == "selection"
    assert verdict.difference.diff == pytest.approx(0.0) and "Selection part (70 validation items" in verdict.text
    assert {(d.split, d.against) for d in exp.intervals} >= {("selection", "baseline"), ("feedback", "baseline")}


def test_a_real_gain_on_the_selection_part_wins(tmp_path):
    exp, trace = _session(tmp_path, set(range(N)))  # right everywhere
    verdict = decide_sota(exp, trace, rule="interval")
    assert verdict.decision is True and verdict.difference.split == "selection" and verdict.difference.items == 70
    assert exp.parts["selection"].score == pytest.approx(100.0) and exp.parts["selection"].count == 70


def test_a_metric_that_is_not_a_mean_over_items_decides_on_the_whole_split_and_says_so(tmp_path):
    holdout = split_holdout({"demo_add": N}, seed=1, share=0.7)
    corpus = ItemScores(benchmark="b", split="validation", core_metric="macro_f1", no_interval="corpus metric")
    trace = Trace(core_metric="macro_f1", baseline_val=40.0, baseline_val_items=str(corpus.save(tmp_path / "b.json")),
                  holdout=holdout)
    exp = Experiment(loop=0, val_score=60.0, val_items=str(corpus.save(tmp_path / "c.json")))
    assert split_record(exp.val_items, holdout) == {}
    verdict = decide_sota(exp, trace, rule="interval")
    assert verdict.rule == "delta" and "the selection part cannot be scored alone" in verdict.text


def test_the_planner_sees_error_samples_of_the_feedback_part_only(tmp_path):
    """One real OpenCompass run (10 wrong items); the feedback part keeps its own wrong items, never others."""
    from ftagent.tools.opencompass import parse
    from ftagent.tools.opencompass.feedback_view import feedback_only

    run = tmp_path / "20261202_145828"
    shutil.copytree(next((FIXTURES / "list_layout").iterdir()), run)
    every = parse.error_samples(run, max_samples=100)
    holdout = split_holdout({"demo_add": len(every)}, seed=3, share=0.7)
    result = EvalResult(benchmark="demo_add", split="validation", core_metric="accuracy", score=0.0,
                        error_samples=every, run_dir=str(run))
    shown = feedback_only(result, holdout)
    assert 0 < len(shown.error_samples) < len(every)
    hidden = {int(i) for i in holdout.selection["demo_add"]}
    questions = [s["question"] for s in shown.error_samples]
    assert not any(every[i]["question"] in questions for i in hidden)  # no selection item, ever
    assert shown.answers is not None and shown.answers.items == len(holdout.feedback["demo_add"])
    gone = feedback_only(result.model_copy(update={"run_dir": str(tmp_path / "deleted")}), holdout)
    assert gone.error_samples == [] and gone.answers is None  # never the samples it came with


TIMES3_YAML = """name: NAME
description: "Multiply a two-digit number by 3. Reply with the result inside \\\\boxed{}, nothing else."
data: {file: NAME.jsonl}
prompt: "{question}"
answer: answer
metric: boxed_integer
"""


def _times3_scenario(tmp: Path, name: str = "times3"):
    """A session's scenario of the user benchmark "What is 3 times N?" (N 10..89), as start-up builds it: its
    frozen copy, the holdout of that copy, the brief rendered by the real renderer."""
    import json

    from ftagent.benchmarks import open_benchmark
    from ftagent.benchmarks.prepared import prepare_session_copy
    from ftagent.core.paths import benchmarks_dir
    from ftagent.core.types import ModelInfo, ScenarioInfo
    from ftagent.finetune.scenario import validation_holdout
    from ftagent.planners.llm.brief import render_brief

    folder = tmp / "bench"
    folder.mkdir()
    rows = [{"question": f"What is 3 times {n}? Put the final answer in \\boxed{{}}.", "answer": f"\\boxed{{{3 * n}}}"}
            for n in range(10, 90)]
    (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / f"{name}.yaml").write_text(TIMES3_YAML.replace("NAME", name))
    key, adapter = open_benchmark(str(folder / f"{name}.yaml"))
    root, digest = prepare_session_copy(adapter, benchmarks_dir(tmp / "ft"), None, None)
    holdout = validation_holdout(adapter, root, seed=39005, share=0.7)
    scenario = ScenarioInfo(benchmark=key, base_model="m", base_model_path=str(tmp / "m"),
                            model_info=ModelInfo(name="m", path=""), file_path=str(tmp / "ft"),
                            workspace_root=str(tmp / "ws"), benchmark_root=str(root), benchmark_digest=digest,
                            holdout=holdout)
    scenario.description_text = render_brief(scenario, benchmark=adapter)
    return scenario, adapter, root


def test_the_brief_states_the_split_and_the_rule_with_this_benchmarks_own_example(tmp_path):
    """Issue 39: times3's prompts carried plus11's example and advised "other wordings"; the selection part
    was not named. The rule now says what the scan counts and that the selection part decides, with an
    example of this benchmark checked by the scan; no selection item is anywhere in the brief."""
    import json

    scenario, adapter, root = _times3_scenario(tmp_path)
    brief = scenario.description_text
    h = scenario.holdout
    assert h.size("feedback") == 12 and h.size("selection") == 28  # 40 validation items of 80
    assert "selection part (28 items)" in brief and "alone decides" in brief and "fewer than 30" in brief
    assert "item `What is 3 times" in brief and "plus 11" not in brief
    assert "is asked again by `What is " in brief and "times 3?`" in brief  # the operands swapped: a hit
    assert "other forms, ranges or wordings" not in brief
    rows = [json.loads(line) for line in (root / "times3" / "validation.jsonl").read_text().splitlines()]
    (abbr,) = h.selection
    hidden = [rows[int(i)]["question"].split("?")[0] for i in h.selection[abbr]]
    shown = [rows[int(i)]["question"].split("?")[0] for i in h.feedback[abbr]]
    assert not [q for q in hidden if q + "?" in brief or q + "`" in brief]  # no selection item, in any line
    assert any(q + "?" in brief for q in shown)  # the example is a feedback item


def test_the_split_is_recorded_in_the_session_snapshot(tmp_path):
    """A resume loads the scenario and the trace from the JSON snapshot: the same parts, never drawn again."""
    from ftagent.finetune.state import FinetuneSessionState

    scenario, _, _ = _times3_scenario(tmp_path, "times3b")
    exp, trace = _session(tmp_path, set(range(N)))
    trace.record(exp)
    state = FinetuneSessionState(session_id="s", scenario=scenario, trace=trace)
    again = FinetuneSessionState.model_validate_json(state.model_dump_json())
    assert again.scenario.holdout == scenario.holdout and again.trace.holdout == trace.holdout
    assert again.trace.baseline_parts == trace.baseline_parts and again.trace.experiments[0].parts == exp.parts
    assert again.scenario.benchmark_root == scenario.benchmark_root and again.scenario.benchmark_digest
