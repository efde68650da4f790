"""ftagent.views.session on sessions produced by the real LoopEngine (tests/helpers/make_sessions.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftagent.jobs.tasks import TaskSpec
from ftagent.ui import frames as F
from ftagent.views import session as D
from ftagent.views.job import load_job
from ftagent.views.layout import detect_layout, signature
from tests.helpers.make_sessions import LoopPlan, SessionPlan, decisions_plan, make_job, make_session


def test_load_finished_session(tmp_path):
    sdir = make_session(tmp_path / "log")
    s = D.load_session(sdir)
    assert s.warnings == [] and not s.running and s.end["status"] == "completed"
    assert (s.benchmark, s.base_model, s.core_metric) == ("demo_add", "builtin/tiny-qwen2", "accuracy")
    assert s.baseline == {"validation": 0.1, "test": 0.05}
    assert [lp.index for lp in s.loops] == [0, 1, 2]
    assert [lp.val_score for lp in s.loops] == [0.4, None, 0.3]
    assert [lp.decision for lp in s.loops] == [True, False, False]
    assert [lp.status for lp in s.loops] == ["succeeded", "failed", "succeeded"]
    assert s.sota_loop == 0 and s.best("validation") == 0.4 and s.best("test") == 0.35
    # loop 0 went validate -> code once: two code rounds, a goto step, 8 steps in all
    lp0 = s.loops[0]
    assert len(lp0.code_rounds) == 2 and [st.status for st in lp0.steps].count("goto") == 1
    assert lp0.hypothesis["hypothesis"].startswith("LoRA rank 8")
    assert s.loops[1].steps[-2].failure.startswith("[train/OOM]")
    assert len(s.llm_calls) == 3 and s.snapshot and "/__session__/2/" in s.snapshot


def test_frames(tmp_path):
    s = D.load_session(make_session(tmp_path / "log"))
    timeline = F.timeline_frame(s)
    assert len(timeline) == 8 + 5 + 6 and set(timeline["status"]) == {"ok", "goto", "failed"}
    scores = F.scores_frame(s)
    assert scores.loc[0, "validation"] == 0.4 and scores.loc[2, "test"] == 0.3
    loss = F.loss_frame(s.loops[0])
    assert list(loss.index) == list(range(1, 11)) and loss["loss"].iloc[0] == 2.0
    assert F.loss_frame(s.loops[1]).empty
    metrics = F.metrics_frame(s.loops[0].results["validation"])
    assert metrics.to_dict("records") == [{"dataset": "demo_add", "metric": "accuracy", "value": 0.4}]
    llm = F.llm_frame(s.llm_calls)
    assert llm["prompt_tokens"].tolist() == [1000, 1001, 1002] and abs(llm["cost_usd"].sum() - 0.0375) < 1e-9


def test_running_and_truncated_session(tmp_path):
    sdir = make_session(tmp_path / "log", running_after_steps=9)
    with open(sdir / "events.jsonl", "a") as fh:
        fh.write('{"ts": 1, "loop": 1, "type": "step_st')  # a killed writer
    s = D.load_session(sdir)
    assert s.running and s.loops[-1].status == "running"
    assert any("incomplete" in w for w in s.warnings)
    assert F.loop_cell(s.loops[1]) == "R" and F.loop_colour(s.loops[1]) == "blue"


def test_session_without_snapshots_or_events(tmp_path):
    sdir = tmp_path / "s1"
    (sdir / "__session__").mkdir(parents=True)
    s = D.load_session(sdir)
    assert s.n_events == 0 and s.loops == [] and any("no events" in w for w in s.warnings)
    assert any("no snapshot" in w for w in s.warnings)


def test_detect_layouts(tmp_path):
    assert detect_layout(tmp_path / "nope").kind == "missing"
    assert detect_layout(tmp_path).kind == "empty"
    sdir = make_session(tmp_path / "sessions")
    assert detect_layout(sdir).kind == "session"
    assert detect_layout(tmp_path / "sessions").kind == "sessions"
    job = make_job(tmp_path / "jobs", "j1", [(TaskSpec(model="m/a", benchmark="demo_add"), SessionPlan(), None)])
    assert detect_layout(job).kind == "job"
    jobs = detect_layout(tmp_path / "jobs")
    assert jobs.kind == "jobs" and [Path(c).name for c in jobs.children] == ["j1"]


def test_job_summary_rows(tmp_path):
    job_dir = make_job(tmp_path, "j1", [
        (TaskSpec(model="builtin/tiny-qwen2", benchmark="demo_add", gpus="0"), SessionPlan(), None),
        (TaskSpec(model="Qwen/Qwen2.5-7B-Instruct", benchmark="aime25", gpus="1"),
         SessionPlan(benchmark="aime25", baseline=(0.0, 0.1), loops=[LoopPlan(val=0.2, test=0.1)] * 2), 9),
        (TaskSpec(model="org/m", benchmark="gsm8k"), None, None),
    ])
    job = load_job(job_dir)
    assert job.kind == "job" and job.plan is not None
    rows, colours = F.summary_rows(job)
    by = {r["Task"]: r for r in rows}
    assert list(by) == ["demo_add_tiny-qwen2", "aime25_Qwen2.5-7B-Instruct", "gsm8k_m"]
    a = by["demo_add_tiny-qwen2"]
    assert (a["State"], a["Baseline"], a["L0"], a["L1"], a["L2"], a["Best"]) == (
        "finished", "0.1 / 0.05", "0.4 / 0.35", "X", "0.3 / 0.3", "0.4 / 0.35")
    assert colours[0] == {"L0": "green", "L1": "red", "L2": "red"}
    b = by["aime25_Qwen2.5-7B-Instruct"]
    assert (b["State"], b["L0"], b["L1"], b["L2"], b["Loops"]) == ("running", "0.2 / 0.1", "R", "-", 1)
    assert by["gsm8k_m"]["State"] == "waiting"
    assert F.job_stats(job) == {"tasks": 3, "running": 1, "finished": 1, "waiting": 1,
                                "loops done": 4, "failures": 1, "improved": 2}
    assert list(F.summary_frame(job).index) == list(by)


def test_signature_changes_when_events_grow(tmp_path):
    sdir = make_session(tmp_path / "log")
    before = signature(tmp_path / "log")
    with open(sdir / "events.jsonl", "a") as fh:
        fh.write('{"type": "message", "text": "hi", "ts": 1}\n')
    assert signature(tmp_path / "log") != before


def test_report_is_a_rendering_of_the_session_view(tmp_path):
    """report.md/json come from the same projection as the UI (one reader of events.jsonl)."""
    from ftagent.views.report import build_report, render_markdown

    sdir = make_session(tmp_path / "log")
    view, report = D.load_session(sdir), build_report(sdir)
    assert (report.baseline_val, report.baseline_test) == (0.1, 0.05)
    assert report.best_loop == view.sota_loop == 0 and (report.best_val, report.best_test) == (0.4, 0.35)
    assert [r.val_score for r in report.loops] == [lp.val_score for lp in view.loops] == [0.4, None, 0.3]
    assert [r.decision for r in report.loops] == [True, False, False]
    assert report.loops[1].failure.startswith("[train/OOM]") and report.loops[1].status == "failed"
    assert report.llm_calls == 3 and report.llm_tokens == 3 * 1200 + 3 and report.llm_cost_usd == 3 * 0.0125
    assert report.training_time_s == 3 * 12.5 and report.wall_time_s >= 0
    md = render_markdown(report)
    assert "| baseline | 0.10 | 0.05 |" in md and "| best (loop 0) | 0.40 | 0.35 |" in md


def test_report_counts_unknown_prices_apart(tmp_path):
    from ftagent.engine.event_log import EventLog
    from ftagent.engine.events import LLMCall
    from ftagent.views.report import build_report, render_markdown

    sdir = make_session(tmp_path / "log")
    EventLog(sdir / "events.jsonl").emit(LLMCall(stage="data_script", model="unpriced/x", prompt_tokens=10,
                                                 completion_tokens=5, cost_usd=None))
    report = build_report(sdir)
    assert report.llm_calls == 4 and report.llm_unpriced_calls == 1 and report.llm_cost_usd == 3 * 0.0125
    assert "(+ 1 calls of unknown price)" in render_markdown(report)


def test_report_never_prices_unpriced_calls_at_zero(tmp_path):
    """A model without a LiteLLM price (a local OpenAI-compatible server): 'cost unknown', never '$0.0000'."""
    from ftagent.views.report import build_report, llm_cost_text, render_markdown

    sdir = make_session(tmp_path / "log", SessionPlan(llm_cost_usd=None))
    report = build_report(sdir)
    assert report.llm_calls == report.llm_unpriced_calls == 3
    md = render_markdown(report)
    assert "cost unknown (3 calls; the model has no price in LiteLLM's table)" in md
    assert "$0.0000" not in md and "unknown price" not in md
    assert llm_cost_text(0.0375, 0, 3) == "$0.0375"
    assert llm_cost_text(0.0375, 2, 5) == "$0.0375 (+ 2 calls of unknown price)"
    assert llm_cost_text(0.0, 0, 0) == "$0.0000"  # no call at all: nothing was spent


def test_model_card_says_cost_unknown_for_unpriced_calls(tmp_path):
    from ftagent.finetune.export import ExportRequest, export_model
    from tests.unit.test_export import NoToolRunner
    from tests.unit.test_export_sessions import exportable_session

    session = exportable_session(tmp_path, plan=SessionPlan(llm_cost_usd=None))
    folder = export_model(ExportRequest(session_dir=session), lambda: NoToolRunner()).folder
    body = (Path(folder) / "README.md").read_text(encoding="utf-8")
    assert "LLM: 3 calls, cost unknown (3 calls; the model has no price in LiteLLM's table)" in body
    assert "$0.0000" not in body


def test_sota_rows_say_why_each_loop_became_best_or_not(tmp_path):
    """The decision view-model the report and the UI share: score, interval vs the best, became best, why."""
    from ftagent.views.report import baseline_rows, build_report, render_markdown, sota_rows

    sdir = make_session(tmp_path / "log", decisions_plan())
    report = build_report(sdir)
    rows = sota_rows(report)
    assert [(r.loop, r.became_best, r.why) for r in rows] == [
        (0, True, "significant gain"), (1, False, "not significant"), (2, False, "integrity flag: benchmark_files")]
    assert report.best_loop == 0
    assert rows[0].cells()["vs best (95 % interval)"] == "+0.3 [+0.2, +0.4] on 30 items vs the baseline"
    assert rows[1].cells() == {"loop": "1", "validation": "0.45", "vs best (95 % interval)":
                               "+0.05 [-0.1, +0.2] on 30 items vs loop 0", "became best": "no", "why": "not significant"}
    assert rows[2].flags == ["benchmark_files: the evaluator's files changed: ftagent/benchmarks/demo_add.py"]
    assert "not a significant gain" in rows[1].verdict and "integrity guard" in rows[2].verdict
    assert baseline_rows(report) == [{"": "base model", "validation": "0.10", "test": "0.05"},
                                     {"": "a constant answer", "validation": "0.25", "test": "0.20"}]
    md = render_markdown(report)
    assert "| new SOTA (significant gain) |" in md and "| no (not significant) |" in md
    assert "| no (integrity flag: benchmark_files) |" in md and "| a constant answer | 0.25 | 0.20 |" in md


def test_sota_rows_of_failed_pending_and_older_sessions(tmp_path):
    """A failed loop, a loop still running, and a session recorded before the feedback named its rule."""
    from ftagent.views.report import build_report, sota_rows

    rows = sota_rows(build_report(make_session(tmp_path / "a")))  # the default plan: no rule recorded
    assert [(r.became_best, r.why, r.difference) for r in rows] == [
        (True, "beats the best", None), (False, "failed", None), (False, "does not beat the best", None)]
    assert rows[0].cells()["vs best (95 % interval)"] == "–"
    live = make_session(tmp_path / "b", decisions_plan(), running_after_steps=3)
    assert [(r.became_best, r.why) for r in sota_rows(build_report(live))] == [(None, "not judged yet")]


def test_best_is_the_sota_not_the_highest_score(tmp_path):
    """A flagged loop scoring 0.9 is not the best: the header and the grid show the SOTA's 0.4 / 0.35."""
    sdir = make_session(tmp_path / "log", decisions_plan())
    s = D.load_session(sdir)
    assert max(lp.val_score for lp in s.loops) == 0.9
    assert (s.sota_loop, s.best("validation"), s.best("test")) == (0, 0.4, 0.35)
    job = load_job(sdir)
    assert F.summary_rows(job)[0][0]["Best"] == "0.4 / 0.35"
    none = D.load_session(make_session(tmp_path / "b", SessionPlan(baseline=(0.5, 0.5),
                                                                   loops=[LoopPlan(val=0.2, test=0.2)])))
    assert none.sota_loop is None and none.best("validation") is None


def test_sota_row_names_the_forgetting_guard_and_the_delta_rule():
    from ftagent.core.forgetting_rule import GuardResult
    from ftagent.views.report import LoopRow, sota_row

    kept = LoopRow(loop=3, val_score=0.6, decision=False, status="succeeded", rule="forgetting",
                   verdict="Kept from SOTA by the forgetting guard: gsm8k ...",
                   forgetting=[GuardResult(benchmark="gsm8k", blocked=True), GuardResult(benchmark="mmlu")])
    assert sota_row(kept).why == "forgetting guard: gsm8k"
    delta = LoopRow(loop=4, val_score=0.6, decision=True, status="succeeded", rule="delta",
                    verdict="Validation accuracy 0.6 beats loop 0 (0.4) by more than FT_SOTA_MIN_DELTA = 0 "
                            "(+0.2). No interval (no per-item scores), so the delta rule decides.")
    assert sota_row(delta).why == "gain above FT_SOTA_MIN_DELTA (no interval)"


def test_wall_time_counts_the_runs_not_the_gap_before_a_resume(tmp_path):
    """Issue 32 (README run as a new user): `ftagent llm_finetune --path SESSION` on a finished session added
    the minutes between the run and the resume to the report's wall time (14 min 24 s became 20 min 28 s)."""
    import json

    from ftagent.views.report import build_report

    sdir = make_session(tmp_path / "log")
    before = build_report(sdir).wall_time_s
    last = D.load_session(sdir).last_ts
    with open(sdir / "events.jsonl", "a") as fh:  # a resume an hour later that had nothing left to run
        for ev in ({"type": "session_start", "session_id": sdir.name, "ts": last + 3600},
                   {"type": "session_end", "status": "completed", "ts": last + 3602}):
            fh.write(json.dumps(ev) + "\n")
    assert build_report(sdir).wall_time_s == pytest.approx(before + 2)


def test_wall_time_includes_the_commands_run_before_the_session_existed(tmp_path):
    """Issue 32: data preparation runs before the session is created and its run event is written after
    session_start; the report's wall time (14 min 24 s) was then shorter than "all subprocesses" (14 min 30 s)."""
    import json

    from ftagent.views.report import build_report

    sdir = tmp_path / "log" / "s1"
    sdir.mkdir(parents=True)
    events = [{"type": "session_start", "session_id": "s1", "ts": 1000.0},
              {"type": "run", "purpose": "data", "command": "prepare", "exit_code": 0, "duration_s": 16.0,
               "ts": 1000.5},  # it started at 984.5, before the session existed
              {"type": "run", "purpose": "train", "command": "llamafactory-cli train", "exit_code": 0,
               "duration_s": 50.0, "ts": 1060.0},
              {"type": "session_end", "status": "completed", "ts": 1061.0}]
    (sdir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    report = build_report(sdir)
    assert report.subprocess_time_s == 66.0
    assert report.wall_time_s == pytest.approx(1061.0 - 984.5) and report.wall_time_s >= report.subprocess_time_s
