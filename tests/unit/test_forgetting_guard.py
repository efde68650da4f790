"""The forgetting guard (issue 31 item 6): a candidate that would become SOTA is scored on the guard
benchmarks against the base model, and a drop beyond FT_GUARD_MAX_DROP (the whole paired interval below
it) keeps it from SOTA; the feedback event, the trace and the verdict say so.

Per-item records are real ItemScores files; the guard's OpenCompass evaluation is replaced by those
records here (tests/integration/test_forgetting_guard.py runs the real one).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from ftagent.benchmarks import get_benchmark
from ftagent.core.errors import UserInputError
from ftagent.core.forgetting_rule import GuardResult, judge_drop
from ftagent.core.sota import decide_sota
from ftagent.core.stats import ItemScores, paired_bootstrap
from ftagent.core.trace import Experiment, Trace
from ftagent.core.types import EvalResult, TrainResult
from ftagent.finetune.forgetting_guard import ForgettingGuard, compare, guard_adapters
from tests.helpers.weights import safetensors_bytes

N = 50


def _items(tmp: Path, name: str, correct: set[int], n: int = N) -> str:
    rec = ItemScores(benchmark="mmlu", split="validation", core_metric="accuracy",
                     items={"mmlu": {f"q{i:03d}": 1.0 if i in correct else 0.0 for i in range(n)}})
    return str(rec.save(tmp / f"{name}.items.json"))


def _result(tmp: Path, name: str, correct: set[int]) -> EvalResult:
    return EvalResult(benchmark="mmlu", split="validation", core_metric="accuracy", score=100.0 * len(correct) / N,
                      items_file=_items(tmp, name, correct))


BASE = set(range(40))  # the base model: 40 of 50 (80 %)


def test_the_same_model_again_is_no_drop(tmp_path):
    res = compare("mmlu", _result(tmp_path, "cand", BASE), _result(tmp_path, "base", BASE), max_drop=5.0)
    assert not res.blocked and res.difference.has_interval
    assert (res.difference.diff, res.difference.low, res.difference.high) == (0.0, 0.0, 0.0)
    assert res.base_score == res.candidate_score == 80.0 and "no drop beyond 5 points" in res.text


def test_a_collapse_is_blocked(tmp_path):
    """Base 80 %, candidate 0 %: -80 with its whole interval far below -5."""
    res = compare("mmlu", _result(tmp_path, "cand", set()), _result(tmp_path, "base", BASE), max_drop=5.0)
    assert res.blocked and res.difference.diff == -80.0 and res.difference.high < -5.0
    assert res.difference.items == N and "forgot" in res.text and "-80.0 [" in res.text


def test_a_drop_within_the_noise_of_50_items_is_not_blocked(tmp_path):
    """3 items lost (-6 points): beyond 5 points as a point value, but the interval reaches above -5."""
    res = compare("mmlu", _result(tmp_path, "cand", set(range(37))), _result(tmp_path, "base", BASE), max_drop=5.0)
    assert res.difference.diff == pytest.approx(-6.0) and res.difference.high >= -5.0 and not res.blocked


def test_without_an_interval_the_point_drop_decides(tmp_path):
    nothing = paired_bootstrap(None, None, against="base", split="guard", diff=-12.0)
    assert nothing.no_interval and judge_drop("mmlu", nothing, max_drop=5.0).blocked
    assert not judge_drop("mmlu", nothing, max_drop=15.0).blocked
    lower_is_better = judge_drop("wer", nothing, max_drop=5.0, direction="min")  # -12 is a gain there
    assert not lower_is_better.blocked and "no interval" in lower_is_better.text


def _experiment(blocked: bool) -> tuple[Experiment, Trace]:
    trace = Trace(core_metric="accuracy", baseline_val=10.0)
    exp = Experiment(loop=0, val_score=90.0)  # a win by the target score (no per-item records: delta rule)
    exp.forgetting = [GuardResult(benchmark="mmlu", blocked=blocked, text="mmlu accuracy vs the base model: -80.0")]
    return exp, trace


@pytest.mark.parametrize("blocked", [True, False])
def test_a_blocked_guard_keeps_a_winning_candidate_from_sota(blocked):
    exp, trace = _experiment(blocked)
    verdict = decide_sota(exp, trace, rule="interval")
    assert verdict.decision is (not blocked)
    if blocked:
        assert verdict.rule == "forgetting" and "forgetting guard: mmlu accuracy vs the base model: -80.0" in verdict.text


def test_guard_keys_are_checked_at_start():
    assert [a.spec.key for a in guard_adapters(["mmlu", " gsm8k", "mmlu", ""], target="demo_add")] == ["mmlu", "gsm8k"]
    with pytest.raises(UserInputError, match="the target benchmark 'demo_add'"):
        guard_adapters(["demo_add"], target="demo_add")
    with pytest.raises(UserInputError, match="FT_GUARD_BENCHMARKS: .*nope_bench"):
        guard_adapters(["nope_bench"], target="demo_add")


def test_the_guard_setting_reads_a_comma_list(monkeypatch):
    from ftagent.core.settings import FTSettings

    monkeypatch.setenv("FT_GUARD_BENCHMARKS", "mmlu,gsm8k")
    ft = FTSettings()
    assert ft.guard_benchmarks == ["mmlu", "gsm8k"] and ft.guard_sample == 50 and ft.guard_max_drop == 5.0
    monkeypatch.delenv("FT_GUARD_BENCHMARKS")
    assert FTSettings().guard_benchmarks == []  # none by default


class _Guard(ForgettingGuard):
    """The real guard with the OpenCompass evaluation replaced by per-item records: the base scores 80 %,
    a candidate whose output folder name contains 'destroyed' 0 %, any other the same as the base."""

    def __init__(self, tmp: Path, scenario) -> None:
        from ftagent.benchmarks import get_benchmark

        settings = SimpleNamespace(ft=SimpleNamespace(guard_sample=N, guard_max_drop=5.0, benchmark_timeout_s=60,
                                                      file_path=tmp))
        from ftagent.tools.opencompass.inference import inference_settings

        super().__init__(scenario, settings, runner=None, adapters=[get_benchmark("mmlu")],
                         inference=inference_settings("builtin/tiny-qwen2"))
        self.tmp, self.calls = tmp, []

    def _evaluate(self, adapter, model_path, template, *, base_path, work_dir, timeout):
        self.calls.append(str(model_path))
        name = f"r{len(self.calls)}"
        return _result(self.tmp, name, set() if "destroyed" in str(model_path) else BASE)


def test_the_workflow_runs_the_guard_only_for_a_winner_and_blocks_a_collapse(tmp_path, monkeypatch):
    from ftagent.engine.events import read_events
    from ftagent.engine.loop import LoopEngine
    from ftagent.engine.session import Session
    from ftagent.finetune.components import Components
    from ftagent.finetune.state import FinetuneSessionState
    from ftagent.finetune.workflow import FinetuneWorkflow
    from ftagent.planners.heuristic.planner import HeuristicCoder, HeuristicProposer
    from tests.unit.test_finetune_workflow import (
        FakeData,
        FakeEvaluator,
        FakeValidator,
        RecordingFeedback,
        _scenario,
    )

    class Trainer:  # loop 0 keeps the base's skills, loop 1 destroys them, loop 2 is no better than the SOTA
        n = 0

        def train(self, code, report, ctx):
            Trainer.n += 1
            out = f"{code.workspace}/{'destroyed' if Trainer.n == 2 else 'kept'}"
            return TrainResult(output_dir=out, model_path=out, config={})

    class Evaluator(FakeEvaluator):
        scores = [50.0, 70.0, 50.0]

        def evaluate_splits(self, model, ctx, splits=("validation", "test"), *, on_progress=None):
            out = super().evaluate_splits(model, ctx, splits)
            out.results["validation"].score = self.scores.pop(0)
            return out

    scenario = _scenario(tmp_path)
    guard = _Guard(tmp_path, scenario)
    components = Components(proposer=HeuristicProposer(scenario), coder=HeuristicCoder(scenario),
                            validator=FakeValidator(), trainer=Trainer(), evaluator=Evaluator(),
                            feedback=RecordingFeedback(), data=FakeData())
    workflow = FinetuneWorkflow(scenario, components, coder_max_loop=3, sota_min_delta=0.0,
                                workspace_root=tmp_path / "ws", sota_rule="delta", forgetting=guard)
    session = Session.create(tmp_path / "log", state_cls=FinetuneSessionState, scenario=scenario)
    session.state.trace.baseline_val = 0.0
    LoopEngine(workflow, session, loop_n=3).run()

    trace = session.state.trace
    events = list(read_events(session.dir / "events.jsonl"))
    guarded = [e for e in events if e.type == "forgetting"]
    feedback = [e for e in events if e.type == "feedback"]
    # the base once, then one evaluation per candidate that would win (loops 0 and 1; loop 2 ties the SOTA)
    assert len(guard.calls) == 3 and guard.calls[0] == "/m" and len(guarded) == 2
    assert [e.loop for e in guarded] == [0, 1] and [e.blocked for e in guarded] == [0, 1]
    assert [f.decision for f in feedback] == [True, False, False] and trace.sota_loop == 0
    assert feedback[1].rule == "forgetting" and "forgot" in feedback[1].verdict
    assert trace.get(1).forgetting[0].blocked and trace.get(1).forgetting[0].difference.diff == -80.0
    assert trace.get(2).forgetting == []  # never asked: it did not beat the SOTA


def test_the_sample_is_prepared_and_cached_apart_from_the_full_split(tmp_path):
    """``sample=n``: the first n items of the seeded validation split, in benchmarks/.sample<n>/<key>; the
    session's own prepared folder and cache entries are neither re-prepared nor served for it."""
    from ftagent.core.settings import load_settings
    from ftagent.tools.opencompass.runs import evaluate_splits_of_path
    from tests.unit.test_oc_splits import FakeOpenCompass

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(safetensors_bytes(b"weights"))
    (model / "chat_template.jinja").write_text("{{ messages }}")
    settings = load_settings(file_path=tmp_path / "ft", benchmark_limit=6)
    runner = FakeOpenCompass()

    def run(sample):
        return evaluate_splits_of_path(model, None, benchmark=get_benchmark("demo_add"), splits=("validation",), settings=settings,
                                       runner=runner, work_dir=tmp_path / "work", sample=sample)["validation"]

    full = run(None)
    marker = (tmp_path / "ft" / "benchmarks" / "demo_add" / "prepared.json").read_text()
    sampled = run(3)
    rows = [line for p in (tmp_path / "ft" / "benchmarks" / ".sample3" / "demo_add").rglob("validation*.jsonl")
            for line in p.read_text().splitlines()]
    full_rows = [line for p in (tmp_path / "ft" / "benchmarks" / "demo_add").rglob("validation*.jsonl")
                 for line in p.read_text().splitlines()]
    assert len(rows) == 3 and rows == full_rows[:3]  # the seeded split's first items
    assert not sampled.cached and len(runner.runs) == 2  # not served the full split's cached result
    assert (tmp_path / "ft" / "benchmarks" / "demo_add" / "prepared.json").read_text() == marker
    assert run(3).cached and run(None).cached and len(runner.runs) == 2 and full.score == sampled.score


@pytest.mark.parametrize("guards,fragment", [("mmlu,nope_bench", "nope_bench"), ("demo_add", "the target benchmark")])
def test_a_bad_guard_benchmark_stops_llm_finetune_before_any_session(tmp_path, guards, fragment):
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FT_", "CHAT_", "OPENAI_"))}
    env.update({"PYTHONPATH": str(repo), "HF_HUB_OFFLINE": "1", "FT_FILE_PATH": str(tmp_path / "ft"),
                "LOG_PATH": str(tmp_path / "log"), "FT_GUARD_BENCHMARKS": guards})
    result = subprocess.run([sys.executable, "-m", "ftagent", "llm_finetune", "--benchmark", "demo_add",
                             "--base-model", "builtin/tiny-qwen2"], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "FT_GUARD_BENCHMARKS" in result.stderr and fragment in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "log").exists()


def test_report_and_card_list_the_guard_differences(tmp_path):
    """A 'forgetting' event of the exported loop: the report's guard lines and the card's guard table."""
    from ftagent.engine.events import ForgettingEvent
    from ftagent.finetune.export import ExportRequest, export_model
    from ftagent.views.report import build_report, render_markdown
    from tests.unit.test_export import NoToolRunner, _card
    from tests.unit.test_export_sessions import exportable_session

    session = exportable_session(tmp_path / "s")
    kept = compare("mmlu", _result(tmp_path, "c0", BASE), _result(tmp_path, "b0", BASE), max_drop=5.0)
    forgot = compare("gsm8k", _result(tmp_path, "c1", set()), _result(tmp_path, "b1", BASE), max_drop=5.0)
    with (session / "events.jsonl").open("a", encoding="utf-8") as fh:
        fh.write(ForgettingEvent(loop=0, results=[kept], blocked=0).model_dump_json() + "\n")
        fh.write(ForgettingEvent(loop=2, results=[forgot], blocked=1).model_dump_json() + "\n")
    md = render_markdown(build_report(session))
    assert "- forgetting guard: 2 candidate(s) scored against the base model, 1 kept from SOTA" in md
    assert "  - loop 0: mmlu accuracy vs the base model: +0.0 [+0.0, +0.0] on 50 items: no drop" in md
    assert "  - loop 2: gsm8k accuracy vs the base model: -80.0 [" in md and "forgot" in md
    result = export_model(ExportRequest(session_dir=session), lambda: NoToolRunner())
    _, body = _card(Path(result.folder))
    assert "| guard benchmark | base model | this model | change | verdict |" in body
    assert "| mmlu (accuracy) | 80.00 | 80.00 | +0.0 [+0.0, +0.0] on 50 items | no drop beyond the limit |" in body
    assert "gsm8k" not in body  # the card is the exported loop's (loop 0), not loop 2's
