"""Issue 43, "Endings and exit codes": a session with no scored candidate is never a success.

* ``no_model``: a session whose loops ran out of time, loops or budget before any candidate was scored ends
  ``no_model`` (exit 4) with why; before: ``timeout`` / ``completed``, exit 0, and a batch job recorded a
  run with nothing to show as a success.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftagent.core.errors import ErrorType, StepError
from ftagent.engine.events import read_events
from ftagent.engine.loop import LoopEngine
from ftagent.engine.session import Session
from tests.unit._workflows import RecordingWorkflow, TraceState
from tests.unit.test_finetune_workflow import _scenario

REPO = Path(__file__).resolve().parents[2]


def _ends(session: Session) -> list[tuple[str, str]]:
    return [(e.status, e.message) for e in read_events(session.events_path) if e.type == "session_end"]


def test_a_timeout_before_any_model_is_no_model_with_the_reason(tmp_path):
    """The only loop runs out of ``--timeout`` in its train step: no candidate was scored."""
    session = Session.create(tmp_path / "log", state_cls=TraceState)
    wf = RecordingWorkflow(plan={(0, "train"): "sleep:1.5"})
    summary = LoopEngine(wf, session, loop_n=3, timeout_s=1.0).run()
    assert summary.status == "no_model", summary
    assert "no loop produced a scored model" in summary.message and "ran out of time" in summary.message
    assert "time budget of 1s used up" in summary.message and "--path" in summary.message
    assert _ends(session) == [("no_model", summary.message)]


def test_loops_that_all_failed_differently_are_no_model_and_one_scored_loop_is_a_success(tmp_path):
    failing = RecordingWorkflow(plan={(0, "train"): "fail", (1, "validate"): "crash"})
    summary = LoopEngine(failing, Session.create(tmp_path / "a", state_cls=TraceState), loop_n=2).run()
    assert summary.status == "no_model"
    assert "its loops ended" in summary.message and "the last failure: [validate/UNKNOWN] RuntimeError: boom" \
        in summary.message
    one_good = RecordingWorkflow(plan={(0, "train"): "fail"})
    assert LoopEngine(one_good, Session.create(tmp_path / "b", state_cls=TraceState), loop_n=2).run().status \
        == "completed"


def test_a_step_limit_is_a_pause_not_an_ending(tmp_path):
    """``--step-n`` stops where the user asked: resumable, not judged (decision: no_model is for endings)."""
    summary = LoopEngine(RecordingWorkflow(), Session.create(tmp_path / "log", state_cls=TraceState), loop_n=2,
                         step_n=3).run()
    assert summary.status == "step_limit"


def test_a_resumed_session_counts_the_scored_loops_of_its_earlier_runs(tmp_path):
    session = Session.create(tmp_path / "log", state_cls=TraceState)
    assert LoopEngine(RecordingWorkflow(), session, loop_n=1).run().status == "completed"
    again = RecordingWorkflow(plan={(1, "train"): "fail"})
    assert LoopEngine(again, session, loop_n=2).run().status == "completed"  # loop 0's score stands


# -- the real CLI and a real job: exit 4, the job records a failure ------------------------------------------
class QuickScenario:
    """``FT_SCEN``: a scenario and a baseline without building a model or running OpenCompass."""

    def __init__(self, settings, runner, emit, *, run) -> None:
        self.root = Path(settings.ft.file_path).parent

    def prepare(self):
        return None

    def build(self, prepared):
        return _scenario(self.root)

    def baseline(self, info, trace, timeout) -> None:
        trace.core_metric, trace.baseline_val, trace.baseline_test = "accuracy", 10.0, 10.0


class FailingProposer:
    """``FT_PROPOSER``: every proposal fails (as an LLM that never answers would)."""

    def __init__(self, scenario, settings) -> None:
        pass

    def propose(self, trace, ctx):
        raise StepError("no plan could be made (scripted)", error_type=ErrorType.LLM)


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FT_", "CHAT_", "OPENAI_", "TMUX"))}
    env.update(PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", FT_FILE_PATH=str(tmp_path / "files"),
               WORKSPACE_PATH=str(tmp_path / "ws"), FT_PLANNER="heuristic", FT_ENV_TYPE="local",
               FT_SCEN=f"{__name__}:QuickScenario", FT_PROPOSER=f"{__name__}:FailingProposer",
               FT_FINAL_EVAL="none")
    return env


def test_the_cli_exits_4_and_the_report_says_why(tmp_path):
    env = {**_env(tmp_path), "LOG_PATH": str(tmp_path / "log")}
    proc = subprocess.run([sys.executable, "-m", "ftagent", "llm_finetune", "--benchmark", "demo_add",
                           "--base-model", "builtin/tiny-qwen2", "--loop-n", "1", "--quiet"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "error: no model: no loop produced a scored model" in proc.stderr, proc.stderr
    (session,) = [p.parent for p in (tmp_path / "log").rglob("events.jsonl")]
    report = (session / "report.md").read_text()
    assert "- ended: no model: no loop produced a scored model" in report
    assert "[propose/LLM] no plan could be made (scripted)" in report
    assert json.loads((session / "report.json").read_text())["status"] == "no_model"


@pytest.mark.skipif(sys.platform != "linux", reason="the local executor's child handling is Linux's")
def test_a_job_records_a_session_with_no_model_as_failed(tmp_path):
    """``ftagent job run`` (local executor, the real ``ftagent llm_finetune`` as the task): exit 4 → failed."""
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps({"tasks": [{"model": "builtin/tiny-qwen2", "benchmark": "demo_add", "loop_n": 1}]}))
    env = {**_env(tmp_path), "FTAGENT_BIN": str(Path(sys.executable).with_name("ftagent"))}
    if not os.access(env["FTAGENT_BIN"], os.X_OK):
        pytest.skip("no ftagent console script beside this python")
    proc = subprocess.run([sys.executable, "-m", "ftagent", "job", "run", str(tasks), "--job-id", "j1",
                           "--log-base", str(tmp_path / "jobs")], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 1 and "exit 4" in proc.stdout, proc.stdout + proc.stderr
    from ftagent.jobs.executors import read_state

    (name,) = [p.name for p in (tmp_path / "jobs" / "j1").iterdir() if p.is_dir() and not p.name.startswith(".")]
    state = read_state(tmp_path / "jobs" / "j1", name)
    assert (state.state, state.exit_code) == ("failed", 4), state
