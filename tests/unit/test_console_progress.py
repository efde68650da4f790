"""Live progress: plain lines for every step when stdout is no terminal; the live display never
lands inside the report printed after it."""

from __future__ import annotations

import io
import re
import time

from rich.console import Console

from ftagent.core.errors import ErrorType, StepFailure
from ftagent.engine.events import (
    BenchmarkResult,
    FeedbackEvent,
    LLMCall,
    Progress,
    ScenarioStage,
    StepEnd,
    StepStart,
)
from ftagent.views.console import ConsoleProgress, loop_label

STEPS = ["propose", "code", "validate", "train", "evaluate", "feedback"]


def _loop_events(loop: int):
    yield ScenarioStage(stage="baseline", status="done")
    for step in STEPS:
        yield StepStart(step=step, loop=loop)
        if step == "train":
            yield Progress(phase="train", done=150, total=300, detail={"loss": 1.234, "lr": 1e-3, "eta_s": 65},
                           loop=loop)
        if step == "propose":
            yield LLMCall(stage="propose", model="m", prompt_tokens=900, completion_tokens=80, cost_usd=None,
                          latency_s=2.0, loop=loop)
        if step == "evaluate":
            yield BenchmarkResult(split="validation", benchmark="demo_add", core_metric="accuracy", score=61.0,
                                  loop=loop)
        failure = StepFailure(stage="validate", error_type=ErrorType.CONFIG, message="bad [key]") \
            if step == "validate" else None
        yield StepEnd(step=step, status="ok" if failure is None else "goto", duration_s=1.5, failure=failure,
                      goto="code" if failure else None, loop=loop)


def test_plain_lines_for_every_step_when_not_a_terminal():
    out = io.StringIO()
    display = ConsoleProgress(Console(file=out, force_terminal=False, width=200), loop_n=3, timeout_s=3600)
    assert not display.live_mode
    display.start()
    for event in _loop_events(0):
        display(event)
    display.stop()
    text = out.getvalue()
    for step in STEPS:
        assert f"loop 0 (1 of 3) {step} …" in text, text
        assert re.search(rf"loop 0 \(1 of 3\) {step} (ok|goto) in 1.5 s", text), text
    assert "[validate/CONFIG] bad [key]" in text  # markup-like text is printed as is
    assert "LLM propose: 900+80 tokens, cost unknown" in text
    assert "loop 0 (1 of 3) validation accuracy: 61.0" in text and "scenario baseline: done" in text
    assert "\x1b[" not in text  # no terminal control codes in logs


def test_heartbeat_line_while_a_command_runs():
    out = io.StringIO()
    display = ConsoleProgress(Console(file=out, force_terminal=False, width=200), loop_n=2, heartbeat_s=0.3)
    display.start()
    display(StepStart(step="train", loop=0))
    display(Progress(phase="train", done=40, total=300, detail={"loss": 2.5, "eta_s": 125}, loop=0))
    time.sleep(1.6)
    display.stop()
    beats = [line for line in out.getvalue().splitlines() if "train 40/300" in line]
    assert beats and "loop 0 (1 of 2) · train · elapsed" in beats[0] and "loss 2.5" in beats[0] and "ETA 2 min 5 s" in beats[0]


def test_live_display_never_garbles_the_report():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    display = ConsoleProgress(console, loop_n=3, timeout_s=600)
    assert display.live_mode
    display.start()
    for loop in range(3):
        for event in _loop_events(loop):
            display(event)
            time.sleep(0.01)
    time.sleep(0.7)  # let the live display refresh a few times
    display.stop()
    report = "# ftagent report — s\n\n| | validation | test |\n|---|---|---|\n| baseline | 0.00 | 0.00 |\n" \
             "| loop 0 | [train/OOM] CUDA out of memory |"
    console.print(report, markup=False, highlight=False)
    text = out.getvalue()
    assert text.count("# ftagent report") == 1
    assert text.endswith(report + "\n"), repr(text[-400:])  # nothing drawn into or after the report
    assert "loop 2 (3 of 3)" in text  # the live display did show progress before


def test_loops_are_numbered_from_zero_like_the_report_and_export():
    """Issue 32 item 4: the console said "loop 1/3" for what the report, UI, card and `export --loop` call loop 0."""
    out = io.StringIO()
    display = ConsoleProgress(Console(file=out, force_terminal=False, width=200), loop_n=3)
    display.start()
    display(StepStart(step="train", loop=2))
    display.stop()
    assert "loop 2 (3 of 3) train …" in out.getvalue()
    assert loop_label(0) == "loop 0" and loop_label(0, 3) == "loop 0 (1 of 3)"


def test_feedback_without_a_score_says_so():
    """Issue 32 item 7: a feedback line never shows a bare None/none for a missing score."""
    out = io.StringIO()
    display = ConsoleProgress(Console(file=out, force_terminal=False, width=200), loop_n=1)
    display.start()
    display(FeedbackEvent(loop=0, decision=False, score=None))
    display.stop()
    line = next(x for x in out.getvalue().splitlines() if "feedback" in x)
    assert "not better (no validation score)" in line and "None" not in line and "validation none" not in line


def test_the_forecast_probe_after_the_baseline_is_shown_as_its_own_stage(tmp_path):
    """Issue 32: for the ~40 s of the forecast's training probe the heartbeat kept naming the finished
    baseline as the current stage; the probe is now a scenario stage of its own (finetune/app.py)."""
    from ftagent.engine.session import Session
    from ftagent.finetune.app import _forecast_stage
    from ftagent.finetune.state import FinetuneSessionState

    session = Session.create(tmp_path / "log", state_cls=FinetuneSessionState)
    progress = ConsoleProgress(Console(file=io.StringIO(), width=200), live=False)
    session.events.subscribe(progress)
    session.events.emit(ScenarioStage(stage="baseline", status="start"))
    session.events.emit(Progress(phase="eval:test", done=100, total=100))
    session.events.emit(ScenarioStage(stage="baseline", status="done"))
    seen = []
    _forecast_stage(session, lambda: seen.append((progress.status_line(), progress.task_line())))
    assert "scenario: forecast" in seen[0][0] and "baseline" not in seen[0][0]
    assert seen[0][1] == ""  # not the finished baseline's last progress (eval:test 100/100)
