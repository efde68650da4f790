"""K trials at once (issue 41) in the console, the report and the forecast: one line per running trial,
the trials as a tree with their slots, the busy fraction, the loops' wall time over K slots."""

from __future__ import annotations

import io
import time
from pathlib import Path

from rich.console import Console

from ftagent.core.forecast_arithmetic import LoopForecast, makespan, what_would_fit
from ftagent.engine.event_log import EventLog
from ftagent.engine.events import (
    HypothesisEvent,
    LoopEnd,
    Progress,
    RunEvent,
    ScenarioStage,
    SessionStart,
    StepEnd,
    StepStart,
    TrialStart,
)
from ftagent.views.console import ConsoleProgress
from ftagent.views.report import build_report, render_markdown


def test_the_console_shows_one_line_per_running_trial() -> None:
    out = io.StringIO()
    display = ConsoleProgress(Console(file=out, force_terminal=False, width=200), loop_n=4, heartbeat_s=0.3)
    display.start()
    for loop, slot in ((0, "slot 0 (core 0)"), (1, "slot 1 (core 1)")):
        display(TrialStart(loop=loop, slot=int(slot[5]), slot_label=slot, step="propose"))
        display(StepStart(step="train", loop=loop))
    display(Progress(phase="train", done=30, total=60, detail={"loss": 0.41}, loop=1))
    time.sleep(1.2)
    display.stop()
    text = out.getvalue()
    assert "loop 1 (2 of 4) starts on slot 1 (core 1) at propose" in text
    assert "2 trials at once · elapsed" in text
    assert "  loop 0 (1 of 4) · slot 0 (core 0) · train" in text
    assert "  loop 1 (2 of 4) · slot 1 (core 1) · train · train 30/60 (loss 0.41)" in text


def _session(tmp_path: Path) -> Path:
    """Two slots; loop 0 and 1 from the baseline at once, loop 2 built on loop 0; each trains 40 s and
    evaluates 10 s of its 60 s; a resume later (its gap is not counted)."""
    session = tmp_path / "s"
    log = EventLog(session / "events.jsonl")
    log.emit(SessionStart(session_id="s", ts=0.0))
    log.emit(ScenarioStage(stage="slots", detail={"k": 2}, ts=1.0))
    for loop, start, parent, slot in ((0, 100.0, None, 0), (1, 100.0, None, 1), (2, 160.0, 0, 0)):
        log.emit(TrialStart(loop=loop, slot=slot, slot_label=f"slot {slot} (core {slot})", ts=start))
        log.emit(HypothesisEvent(loop=loop, reason="", hypothesis=f"h{loop}", parent=parent, ts=start))
        log.emit(StepStart(step="train", loop=loop, ts=start))
        log.emit(RunEvent(purpose="data", command="python process_data.py", exit_code=0, duration_s=10.0,
                          loop=loop, ts=start + 10))
        log.emit(RunEvent(purpose="train", command="llamafactory-cli train", exit_code=0, duration_s=40.0,
                          loop=loop, ts=start + 50))
        log.emit(RunEvent(purpose="eval", command="opencompass", exit_code=0, duration_s=10.0, loop=loop,
                          ts=start + 60))
        log.emit(StepEnd(step="train", status="ok", duration_s=60.0, loop=loop, ts=start + 60))
        log.emit(LoopEnd(loop=loop, status="succeeded", duration_s=60.0, is_sota=loop == 0, ts=start + 60))
    return session


def test_the_report_shows_the_trials_as_a_tree_with_their_slots_and_the_busy_fraction(tmp_path: Path) -> None:
    report = build_report(_session(tmp_path))
    # 3 trials x 50 s of training + evaluation on 2 slots over 120 s of trials (100 s to 220 s)
    assert (report.busy.busy_s, report.busy.slots, report.busy.wall_s) == (150.0, 2, 120.0)
    assert report.busy.fraction == 0.625
    assert report.trial_tree == ["baseline", "├─ loop 0 [slot 0 (core 0)]: val –, succeeded",
                                 "│  └─ loop 2 [slot 0 (core 0)]: val –, succeeded",
                                 "└─ loop 1 [slot 1 (core 1)]: val –, succeeded"]
    text = render_markdown(report)
    assert "- busy fraction (CPU slots): 0.62 (training + evaluation 2 min 30 s on 2 slot(s)" in text
    assert "loop 2 [slot 0 (core 0)]" in text


def test_the_forecast_prices_k_slots_as_the_schedule_of_the_loops() -> None:
    assert makespan([10, 10, 10, 10], 1) == 40 and makespan([10, 10, 10, 10], 2) == 20
    assert makespan([10, 20, 40], 2) == 50  # loop 2 waits for the slot loop 0 frees at 10 s
    from ftagent.core.forecast_arithmetic import Forecast, TrainPlan

    loops = [LoopForecast(loop=i, train_s=50.0, eval_s=10.0, other_s=0.0) for i in range(4)]
    plan = TrainPlan(method="full", rows=100, effective_batch=8)
    one = Forecast(planner="heuristic", loops=loops, plan=plan, baseline_eval_s=10.0, timeout_s=200.0)
    two = one.model_copy(update={"slots": 2})
    assert (one.total_s, two.total_s) == (250.0, 130.0)
    assert two.fits_timeout and not one.fits_timeout
    assert what_would_fit(one).startswith("--loop-n 3 would fit")
