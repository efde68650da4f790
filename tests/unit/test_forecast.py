"""The forecast's arithmetic, its event, the report's forecast vs actual, the UI hook and the brief line."""

from __future__ import annotations

import json
import math
from pathlib import Path

from ftagent.core.forecast_arithmetic import (
    EvalProbe,
    Forecast,
    TrainPlan,
    TrainProbe,
    build_forecast,
    eval_seconds,
    grown,
    percent_error,
    train_seconds,
)
from ftagent.engine.events import EVENT_ADAPTER, ForecastEvent, LoopEnd, SessionStart, StepEnd
from ftagent.finetune.llm_cost import llm_forecast
from ftagent.finetune.probes import eval_probe_from_events
from ftagent.planners.llm.estimate import estimate_line
from ftagent.ui.frames import session_forecast, step_times_frame
from ftagent.views.forecast_text import forecast_lines, forecast_table_rows, versus
from ftagent.views.report import build_report, render_markdown
from ftagent.views.session import load_session

TRAIN = TrainProbe(key="t", s_per_step=0.2, startup_s=10.0, validate_s=30.0, revalidate_s=15.0, steps=10)
EVAL = EvalProbe(key="e", fixed_s=12.0, s_per_item=0.01, items=200)


def _forecast(**kw) -> Forecast:
    plan = TrainPlan(method="full", rows=1000, max_steps=100, effective_batch=32, cutoff_len=64)
    return build_forecast(planner="heuristic", loop_n=3, plan=plan, train=TRAIN, evaluation=EVAL, **kw)


def test_steps_from_rows_epochs_and_batch():
    assert TrainPlan(rows=1000, epochs=3, effective_batch=32).steps == math.ceil(3000 / 32)
    assert TrainPlan(rows=1000, epochs=3, max_steps=7, effective_batch=32).steps == 7  # max_steps wins
    assert TrainPlan(rows=1000, effective_batch=16).steps_per_epoch() == 63


def test_seconds_scale_the_probes():
    plan = TrainPlan(rows=320, epochs=2, effective_batch=32)
    assert train_seconds(TRAIN, plan) == 10.0 + 20 * 0.2
    assert eval_seconds(EVAL) == 12.0 + 200 * 0.01
    assert grown(TrainPlan(max_steps=300), 4, cap=1000).max_steps == 1000
    assert grown(TrainPlan(rows=10, epochs=1.0), 2).epochs == 2.0


def test_forecast_per_loop_total_and_fit():
    f = _forecast(growth=2.0, timeout_s=120.0)
    assert [lp.train_s for lp in f.loops] == [30.0, 50.0, 90.0]  # 10 s + 100/200/400 steps x 0.2 s
    assert [lp.other_s for lp in f.loops] == [30.0, 15.0, 15.0]  # the template check: loop 0 only
    assert all(lp.eval_s == 14.0 for lp in f.loops)
    assert f.baseline_eval_s == 14.0
    assert f.total_s == 14.0 + sum(lp.total_s for lp in f.loops)
    assert f.fits_timeout is False
    assert _forecast().fits_timeout is None  # no --timeout
    assert _forecast(timeout_s=10_000).fits_timeout is True
    assert f.s_per_epoch == 32 * 0.2  # ceil(1000 / 32) steps


def test_percent_error():
    assert percent_error(130.0, 100.0) == 30.0
    assert percent_error(None, 100.0) is None and percent_error(1.0, 0.0) is None


def test_event_round_trip():
    ev = ForecastEvent(forecast=_forecast())
    back = EVENT_ADAPTER.validate_json(ev.model_dump_json())
    assert isinstance(back, ForecastEvent) and back.forecast.total_s == ev.forecast.total_s


def test_eval_probe_from_baseline_events():
    events = [
        {"type": "progress", "phase": "start", "ts": 100.0, "loop": None},
        {"type": "progress", "phase": "infer:validation", "done": 0, "total": 100, "ts": 115.0, "loop": None},
        {"type": "progress", "phase": "infer:test", "done": 100, "total": 100, "ts": 117.0, "loop": None},
        {"type": "run", "purpose": "eval", "duration_s": 21.0, "ts": 121.0, "loop": None},
        {"type": "run", "purpose": "eval", "duration_s": 99.0, "ts": 300.0, "loop": 0},  # a loop's: not the baseline
    ]
    probe = eval_probe_from_events(events)
    assert probe is not None and probe.items == 200
    assert probe.s_per_item == 0.01 and probe.fixed_s == 19.0
    assert eval_probe_from_events(events[:3]) is None  # no run: the baseline was cached


def test_heuristic_planner_makes_no_llm_calls():
    llm = llm_forecast(None, None, "heuristic", 3)
    assert llm.calls == 0 and llm.cost_usd == 0.0


def test_rendering_names_every_part():
    f = _forecast(timeout_s=100.0)
    rows = forecast_table_rows(f)
    assert [r[0] for r in rows] == ["baseline", "loop 0", "loop 1", "loop 2", "total"]
    text = "\n".join(forecast_lines(f))
    assert "0.200 s/step" in text and "200 items" in text and "does NOT fit" in text and "LLM: 0 calls" in text


def test_estimate_line_for_the_planner():
    f = _forecast(timeout_s=1800.0)
    line = estimate_line(f)
    assert "s per optimizer step" in line and "One epoch of 1000 rows is 32 steps" in line
    assert "per-loop time under Budgets" in line and "not measured yet" not in line
    assert "--timeout" not in line and "at most about" not in line  # one budget figure per prompt: Budgets
    assert estimate_line(None) == ""


def test_estimate_line_without_a_timeout_points_at_no_missing_budget():
    """Without --timeout the Budgets section has no per-loop figure, so the line must not send the planner
    looking for one (relay critique: 'Budgets gives no per-loop time')."""
    line = estimate_line(_forecast(timeout_s=None))
    assert "under Budgets" not in line and "no wall-clock limit, only its number of loops" in line


def _session(tmp_path: Path, forecast: Forecast | None, loop_s: float = 100.0) -> Path:
    d = tmp_path / "s"
    d.mkdir()
    events = [SessionStart(session_id="s", benchmark="demo_add", planner="heuristic", ts=1.0)]
    if forecast is not None:
        events.append(ForecastEvent(forecast=forecast, ts=2.0))
    for i in range(2):
        events += [StepEnd(step="train", status="ok", duration_s=loop_s / 2, loop=i, ts=3.0 + i),
                   LoopEnd(status="succeeded", duration_s=loop_s, loop=i, ts=3.5 + i)]
    with open(d / "events.jsonl", "w", encoding="utf-8") as fh:
        for ev in events:
            fh.write(ev.model_dump_json() + "\n")
    return d


def test_report_shows_forecast_vs_actual(tmp_path):
    f = _forecast()
    d = _session(tmp_path, f)
    rows = versus(load_session(d))
    assert [r.loop for r in rows] == [0, 1, 2, None]
    assert rows[0].actual_s == 100.0 and rows[2].actual_s is None  # loop 2 did not run
    assert rows[-1].forecast_s == round(f.loops[0].total_s + f.loops[1].total_s, 2)
    assert rows[0].error_pct == percent_error(f.loops[0].total_s, 100.0)
    md = render_markdown(build_report(d))
    assert "## Forecast vs actual" in md and "| total |" in md
    assert json.loads(build_report(d).model_dump_json())["forecast"][0]["loop"] == 0


def test_report_without_a_forecast_has_no_section(tmp_path):
    assert "Forecast vs actual" not in render_markdown(build_report(_session(tmp_path, None)))


def test_ui_hook_adds_forecast_rows(tmp_path):
    view = load_session(_session(tmp_path, _forecast()))
    hook = session_forecast(view)
    assert hook is not None and set(hook) == {0, 1, 2}
    frame = step_times_frame(view, hook)
    assert list(frame["row"]) == ["actual", "forecast", "actual", "forecast"]
    (tmp_path / "none").mkdir()
    assert session_forecast(load_session(_session(tmp_path / "none", None))) is None
