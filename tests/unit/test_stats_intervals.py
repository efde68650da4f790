"""Issue 31 items 1-2: per-item scores, paired bootstrap intervals and the SOTA rule that ignores noise."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ftagent.core.errors import StepFailure
from ftagent.core.sota import decide_sota, differences
from ftagent.core.stats import ItemScores, load_items, paired_bootstrap
from ftagent.core.trace import Experiment, Trace
from ftagent.tools.opencompass import parse
from ftagent.tools.opencompass.items import item_scores, write_item_scores

FIXTURES = Path(__file__).parents[1] / "fixtures" / "opencompass"


def _record(correct: list[int], name: str = "demo_add", split: str = "validation", **kw) -> ItemScores:
    return ItemScores(benchmark="demo_add", split=split, core_metric="accuracy",
                      items={name: {str(i): float(c) for i, c in enumerate(correct)}}, **kw)


def _write(tmp_path: Path, label: str, record: ItemScores) -> str:
    return str(record.save(tmp_path / f"{label}.items.json"))


def test_bootstrap_is_deterministic_for_a_seed_and_brackets_the_gain():
    base = _record([1] * 30 + [0] * 70)
    cand = _record([1] * 80 + [0] * 20)
    a = paired_bootstrap(cand, base, against="baseline", split="validation")
    b = paired_bootstrap(cand, base, against="baseline", split="validation")
    assert a == b and a.resamples >= 1000 and a.items == 100 and a.level == 0.95
    assert a.diff == pytest.approx(50.0) and 35.0 < a.low < 50.0 < a.high < 65.0
    other = paired_bootstrap(cand, base, against="baseline", split="validation", seed=1)
    assert other.low != a.low or other.high != a.high  # the seed is what makes it reproducible
    assert a.text().startswith("+50.0 [+") and a.text().endswith("on 100 items")


def test_zero_gain_has_the_interval_zero_and_a_noisy_gain_straddles_zero():
    same = _record([1, 0] * 50)
    z = paired_bootstrap(same, same, against="SOTA", split="validation")
    assert (z.diff, z.low, z.high) == (0.0, 0.0, 0.0)
    # 3 items better, flips both ways: +3 points on 100 items is noise
    base = _record([1] * 50 + [0] * 50)
    cand = _record([0] * 5 + [1] * 53 + [0] * 42)
    noisy = paired_bootstrap(cand, base, against="SOTA", split="validation")
    assert noisy.diff == pytest.approx(3.0) and noisy.low < 0 < noisy.high


def test_pairing_is_by_item_id_not_by_position():
    base = _record([1, 0, 1, 0])
    shuffled = ItemScores(core_metric="accuracy", items={"demo_add": {"3": 0.0, "2": 1.0, "1": 0.0, "0": 1.0}})
    assert paired_bootstrap(shuffled, base, against="SOTA", split="validation").high == 0.0
    missing = ItemScores(core_metric="accuracy", items={"demo_add": {"0": 1.0, "1": 0.0, "2": 1.0}})
    d = paired_bootstrap(missing, base, against="SOTA", split="validation", diff=-8.3)
    assert d.low is None and "different items" in d.no_interval and d.diff == -8.3
    assert "no interval" in d.text()
    assert paired_bootstrap(None, base, against="SOTA", split="validation").no_interval == "per-item scores missing"
    corpus = _record([1, 0, 1, 0], no_interval="macro_f1 of x (40) is not a mean over its items")
    assert "not a mean" in paired_bootstrap(corpus, base, against="SOTA", split="validation").no_interval


def test_strata_weigh_like_the_core_score():
    """Two sub-datasets of 10 and 90 items weigh equally, as parse.core_score averages them."""
    cand = ItemScores(items={"a": {str(i): 1.0 for i in range(10)}, "b": {str(i): 0.0 for i in range(90)}})
    base = ItemScores(items={"a": {str(i): 0.0 for i in range(10)}, "b": {str(i): 0.0 for i in range(90)}})
    assert cand.score() == pytest.approx(50.0)
    d = paired_bootstrap(cand, base, against="baseline", split="test")
    assert d.diff == pytest.approx(50.0) and d.low == d.high == pytest.approx(50.0)


# -- the SOTA rule --------------------------------------------------------------------------------

def _trace(tmp_path: Path, base: list[int], sota: list[int] | None = None) -> Trace:
    trace = Trace(core_metric="accuracy", baseline_val=100.0 * sum(base) / len(base),
                  baseline_val_items=_write(tmp_path, "base", _record(base)))
    if sota is not None:
        trace.record(Experiment(loop=0, val_score=100.0 * sum(sota) / len(sota), decision=True,
                                val_items=_write(tmp_path, "sota", _record(sota))))
    return trace


def _candidate(tmp_path: Path, correct: list[int], loop: int = 1, label: str = "cand") -> Experiment:
    return Experiment(loop=loop, val_score=100.0 * sum(correct) / len(correct),
                      val_items=_write(tmp_path, label, _record(correct)))


def test_planted_zero_gain_candidate_never_becomes_sota(tmp_path):
    """The same model again (identical per-item correctness) under the interval rule, at any min delta."""
    sota = [1] * 62 + [0] * 38
    trace = _trace(tmp_path, [1] * 30 + [0] * 70, sota)
    again = _candidate(tmp_path, sota)
    for min_delta in (0.0, 0.5):
        d = decide_sota(again, trace, rule="interval", min_delta=min_delta)
        assert d.decision is False and d.rule == "interval"
        assert "+0.0 [+0.0, +0.0] on 100 items: not a significant gain" in d.text
    # a tiny noisy gain that the delta rule would take is refused too
    noisy = _candidate(tmp_path, [0] * 2 + [1] * 63 + [0] * 35, label="noisy")
    assert decide_sota(noisy, trace, rule="delta").decision is True
    d = decide_sota(noisy, trace, rule="interval")
    assert d.decision is False and "not a significant gain" in d.text and "vs loop 0" in d.text


def test_clear_gain_becomes_sota_and_min_delta_raises_the_bar(tmp_path):
    trace = _trace(tmp_path, [1] * 30 + [0] * 70)
    clear = _candidate(tmp_path, [1] * 80 + [0] * 20)
    d = decide_sota(clear, trace, rule="interval")
    assert d.decision is True and ": a significant gain." in d.text and "vs the baseline" in d.text
    assert d.difference is not None and d.difference.against == "baseline"
    assert decide_sota(clear, trace, rule="interval", min_delta=45.0).decision is False  # low bound ~40


def test_no_interval_falls_back_to_the_delta_rule_and_says_so(tmp_path):
    trace = _trace(tmp_path, [1] * 30 + [0] * 70)
    no_items = Experiment(loop=1, val_score=31.0)
    d = decide_sota(no_items, trace, rule="interval")
    assert d.decision is True and d.rule == "delta" and "No interval (per-item scores missing)" in d.text
    tie = Experiment(loop=1, val_score=30.0)
    assert decide_sota(tie, trace, rule="interval").decision is False
    failed = Experiment(loop=1, val_score=99.0, failure=StepFailure(stage="train", message="x"))
    assert decide_sota(failed, trace).decision is False
    assert decide_sota(Experiment(loop=1, val_score=10.0), Trace()).decision is True  # nothing to beat yet


def test_differences_vs_baseline_and_sota_on_both_splits(tmp_path):
    trace = _trace(tmp_path, [1] * 30 + [0] * 70, [1] * 50 + [0] * 50)
    trace.baseline_test = 20.0
    trace.baseline_test_items = _write(tmp_path, "base_test", _record([1] * 20 + [0] * 80, split="test"))
    cand = _candidate(tmp_path, [1] * 80 + [0] * 20, loop=1)
    cand.test_score, cand.test_items = 70.0, _write(tmp_path, "cand_test", _record([1] * 70 + [0] * 30, split="test"))
    got = {(d.split, d.against): d for d in differences(cand, trace)}
    assert set(got) == {("validation", "baseline"), ("validation", "SOTA"), ("test", "baseline"), ("test", "SOTA")}
    assert got["validation", "SOTA"].diff == pytest.approx(30.0) and got["validation", "SOTA"].reference == "loop 0"
    assert got["test", "baseline"].diff == pytest.approx(50.0) and got["test", "baseline"].has_interval
    assert got["test", "SOTA"].no_interval == "per-item scores missing"  # the SOTA has no test record


# -- per-item records from real OpenCompass output -----------------------------------------------

def test_item_scores_of_a_real_run_match_the_reported_score(tmp_path):
    run = next((FIXTURES / "runs_passk").iterdir())
    metrics = parse.read_metrics(run, "validation")
    rec = item_scores(run, "validation", "accuracy", metrics, benchmark="demo_add")
    assert rec.no_interval is None and rec.items == {"demo_add": {"0": 0.5, "1": 1.0, "2": 0.5, "3": 0.0}}
    assert rec.score() == pytest.approx(parse.core_score(metrics, "accuracy"))
    # G-Pass@k is not a mean of the items' correctness: no interval, never an invented one
    gpass = item_scores(run, "validation", "G-Pass@2_0.0", metrics)
    assert gpass.no_interval and "not a mean over its items" in gpass.no_interval
    copy = tmp_path / run.name
    shutil.copytree(run, copy)
    path = write_item_scores(copy, "validation", "accuracy", metrics)
    assert path and Path(path).parent == copy and load_items(path) == rec.model_copy(update={"benchmark": ""})


def test_item_scores_without_item_ids_say_no_interval(tmp_path):
    run = tmp_path / "20261205_000000"
    shutil.copytree(next((FIXTURES / "list_layout").iterdir()), run)
    result = next((run / "results").glob("*/*.json"))
    data = json.loads(result.read_text())
    for det in data["details"]:
        det.pop("example_abbr")
    result.write_text(json.dumps(data))
    rec = item_scores(run, "validation", "accuracy", parse.read_metrics(run), one_split=True)
    assert rec.no_interval and "without item ids" in rec.no_interval


def test_the_eval_cache_keeps_a_copy_of_the_item_scores(tmp_path):
    from ftagent.core.types import EvalResult
    from ftagent.tools.opencompass.cache import EvalCache

    run = tmp_path / "run"
    run.mkdir()
    path = _record([1, 0, 1]).save(run / "item_scores_validation.json")
    cache = EvalCache(tmp_path / "cache")
    cache.put("k", EvalResult(benchmark="demo_add", split="validation", core_metric="accuracy", score=66.7,
                              items_file=str(path)))
    shutil.rmtree(run)  # the loop's workspace is gone: the hit still has its items
    hit = cache.get("k")
    assert hit is not None and hit.items_file == str(tmp_path / "cache" / "k.items.json")
    assert load_items(hit.items_file) == _record([1, 0, 1])


# -- through the real workflow and engine: the decision, the event, the console line ---------------

class _ItemsEvaluator:
    """Scores validation/test from planted per-item correctness, written as real item files."""

    def __init__(self, root: Path, val: list[int], test: list[int]) -> None:
        self.root, self.val, self.test = root, val, test

    def evaluate_splits(self, model, ctx, splits=("validation", "test"), *, on_progress=None):
        from ftagent.core.types import EvalResult, SplitResults

        out = SplitResults()
        for split in splits:
            correct = self.val if split == "validation" else self.test
            path = _record(correct, split=split).save(self.root / f"loop{ctx.loop.index}_{split}.items.json")
            out.results[split] = EvalResult(benchmark="demo_add", split=split, core_metric="accuracy",
                                            score=100.0 * sum(correct) / len(correct), items_file=str(path))
        return out


def _session(tmp_path: Path, val: list[int], *, rule: str = "interval"):
    from ftagent.engine.events import read_events
    from ftagent.engine.loop import LoopEngine
    from ftagent.engine.session import Session
    from ftagent.finetune.components import Components
    from ftagent.finetune.state import FinetuneSessionState
    from ftagent.finetune.workflow import FinetuneWorkflow
    from ftagent.planners.heuristic.planner import HeuristicCoder, HeuristicFeedback, HeuristicProposer
    from tests.unit.test_finetune_workflow import FakeData, FakeTrainer, FakeValidator, _scenario

    scenario = _scenario(tmp_path)
    tmp_path.joinpath("items").mkdir(parents=True)
    evaluator = _ItemsEvaluator(tmp_path / "items", val, [1] * 40 + [0] * 60)
    components = Components(proposer=HeuristicProposer(scenario), coder=HeuristicCoder(scenario),
                            validator=FakeValidator(), trainer=FakeTrainer(), evaluator=evaluator,
                            feedback=HeuristicFeedback(scenario), data=FakeData())
    workflow = FinetuneWorkflow(scenario, components, coder_max_loop=3, sota_min_delta=0.0,
                                workspace_root=tmp_path / "ws", sota_rule=rule)
    session = Session.create(tmp_path / "log", state_cls=FinetuneSessionState, scenario=scenario)
    trace = session.state.trace
    trace.core_metric = "accuracy"
    base = [1] * 30 + [0] * 70
    trace.baseline_val, trace.baseline_val_items = 30.0, _write(tmp_path, "base_val", _record(base))
    trace.baseline_test = 30.0
    trace.baseline_test_items = _write(tmp_path, "base_test", _record(base, split="test"))
    LoopEngine(workflow, session, loop_n=1).run()
    events = [e for e in read_events(session.dir / "events.jsonl") if e.type == "feedback"]
    return session, events[-1]


def test_the_workflow_keeps_a_zero_gain_candidate_out_and_records_the_intervals(tmp_path):
    session, event = _session(tmp_path, [1] * 30 + [0] * 70)  # the base model again
    exp = session.state.trace.get(0)
    assert exp.decision is False and session.state.trace.sota_loop is None
    assert event.rule == "interval" and "+0.0 [+0.0, +0.0] on 100 items: not a significant gain" in event.verdict
    assert "not a significant gain" in exp.reason  # what the planner reads next
    got = {(d.split, d.against): d for d in event.intervals}
    assert set(got) == {("validation", "baseline"), ("test", "baseline")}
    assert got["test", "baseline"].diff == pytest.approx(10.0) and got["test", "baseline"].has_interval
    assert exp.val_items and exp.intervals == event.intervals
    # the console's feedback line carries the interval
    from rich.console import Console

    from ftagent.views.console import ConsoleProgress

    progress = ConsoleProgress(Console(width=300), live=False)
    line = progress._apply(event)
    assert "not better (validation 30 (+0.0 [+0.0, +0.0] vs baseline, 100 items))" in line


def test_the_workflow_takes_a_clear_gain_and_the_delta_rule_a_noisy_one(tmp_path):
    session, event = _session(tmp_path / "a", [1] * 80 + [0] * 20)
    assert session.state.trace.sota_loop == 0 and event.decision is True and "a significant gain" in event.verdict
    noisy = [0] * 2 + [1] * 33 + [0] * 65  # +3 points, 2 items worse and 5 better: noise
    session, event = _session(tmp_path / "b", noisy)
    assert session.state.trace.sota_loop is None and "not a significant gain" in event.verdict
    session, event = _session(tmp_path / "c", noisy, rule="delta")
    assert session.state.trace.sota_loop == 0 and event.rule == "delta"


# -- the report, the card and the UI show the recorded intervals -----------------------------------

def _intervals() -> list:
    from ftagent.core.stats import Difference

    return [Difference(against="baseline", split="validation", reference="the baseline", diff=30.0, low=22.0,
                       high=38.0, items=100, resamples=2000),
            Difference(against="baseline", split="test", reference="the baseline", diff=30.0,
                       no_interval="macro_f1 of x (40) is not a mean over its items")]


def test_report_json_and_md_carry_the_intervals(tmp_path):
    from ftagent.views.report import write_report
    from tests.helpers.make_sessions import LoopPlan, SessionPlan, make_session

    plan = SessionPlan(baseline=(10.0, 5.0), loops=[LoopPlan(val=40.0, test=35.0, intervals=_intervals())])
    session = make_session(tmp_path / "log", plan)
    md, js = write_report(session)
    report = json.loads(js.read_text())
    (row,) = report["loops"]
    assert row["intervals"][0]["low"] == 22.0 and row["intervals"][1]["no_interval"].endswith("mean over its items")
    assert report["best_intervals"] == row["intervals"]
    text = md.read_text()
    assert "| best (loop 0) | 40.00 (+30.0 [+22.0, +38.0] on 100 items vs baseline) |" in text
    assert "- loop 0: validation 40 (+30.0 [+22.0, +38.0] vs baseline, 100 items); test 35 (+30.0 vs baseline, " \
           "no interval)" in text


def test_the_model_card_shows_the_interval_or_says_none(tmp_path):
    from tests.helpers.make_sessions import LoopPlan, SessionPlan
    from tests.unit.test_export import _card, _export
    from tests.unit.test_export_sessions import exportable_session

    plan = SessionPlan(baseline=(10.0, 5.0), loops=[LoopPlan(val=40.0, test=35.0, intervals=_intervals())])
    folder, _ = _export(exportable_session(tmp_path, plan=plan))
    _, body = _card(folder)
    assert "| validation | 10.00 | 40.00 | +30.0 [+22.0, +38.0] on 100 items |" in body
    assert "| test | 5.00 | 35.00 | +30.00 (no interval: macro_f1 of x (40) is not a mean over its items) |" in body
    assert "95 % paired bootstrap interval" in body


def test_the_ui_shows_the_differences(tmp_path, monkeypatch):
    pytest.importorskip("streamlit")
    from ftagent.views.session import load_session
    from tests.helpers.make_sessions import LoopPlan, SessionPlan, make_session
    from tests.unit.test_ui_app import _run

    plan = SessionPlan(baseline=(10.0, 5.0), loops=[LoopPlan(val=40.0, test=35.0, intervals=_intervals())])
    session = make_session(tmp_path / "log", plan)
    from ftagent.ui import frames as F

    (lp,) = load_session(session).loops
    assert F.interval_lines(lp) == ["validation 40 (+30.0 [+22.0, +38.0] vs baseline, 100 items)",
                                    "test 35 (+30.0 vs baseline, no interval)"]
    at = _run(tmp_path / "log", monkeypatch, page="Single Task")
    assert any("**Differences** (95 % paired bootstrap interval): validation 40 (+30.0 [+22.0, +38.0]" in md.value
               for md in at.markdown)


def test_no_planner_sees_a_test_interval(tmp_path):
    from ftagent.planners.llm.view import planner_view

    trace = _trace(tmp_path, [1] * 30 + [0] * 70)
    exp = _candidate(tmp_path, [1] * 80 + [0] * 20)
    exp.test_score, exp.test_items = 77.0, _write(tmp_path, "t", _record([1] * 77 + [0] * 23, split="test"))
    trace.baseline_test, trace.baseline_test_items = 30.0, _write(tmp_path, "bt", _record([1] * 30 + [0] * 70))
    exp.intervals = differences(exp, trace)
    assert any(d.split == "test" for d in exp.intervals)
    trace.record(exp)
    seen = planner_view(trace).model_dump_json()
    assert "test" not in seen.replace("tests", "") and "77" not in seen
