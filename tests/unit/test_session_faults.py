"""Issue 34 (session-level faults of a fault audit): each test reproduces one on real files.

* 34.1 a full workspace disk during validate: the session stops (env_error) instead of 20 doomed
  micro-batch runs and ``completed``. Real: the workspace is a 2 MB tmpfs (root and mount(8) needed).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftagent.core.errors import ErrorType, StepFailure
from ftagent.core.types import ValidationReport
from ftagent.engine.events import read_events
from ftagent.engine.loop import LoopEngine
from ftagent.engine.session import Session
from ftagent.finetune.state import FinetuneSessionState
from ftagent.finetune.workflow import Components, FinetuneWorkflow
from ftagent.planners.heuristic.planner import HeuristicCoder, HeuristicProposer
from tests.unit.test_finetune_workflow import (
    FakeData,
    FakeEvaluator,
    FakeTrainer,
    RecordingFeedback,
    _scenario,
)


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 2 MB tmpfs at ``tmp_path/small`` (skips without root or mount(8))."""
    where = tmp_path / "small"
    where.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root and mount(8) for a 2 MB tmpfs")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


def _fill(path: Path) -> None:
    """Write to ``path`` until the disk is full (raises the real OSError ENOSPC)."""
    with open(path, "wb") as fh:
        for _ in range(64):
            fh.write(b"\0" * 2**18)
            fh.flush()
            os.fsync(fh.fileno())


class WritingValidator:
    """Writes its config and a checkpoint into the workspace, as the real validator does."""

    def __init__(self, via_subprocess: bool) -> None:
        self.via_subprocess, self.calls = via_subprocess, 0

    def validate(self, code, ctx):
        self.calls += 1
        out = Path(code.workspace) / "debug" / "model.safetensors"
        out.parent.mkdir(parents=True, exist_ok=True)
        if not self.via_subprocess:
            _fill(out)  # an OSError out of the validator itself
        run = subprocess.run([sys.executable, "-c", f"import pathlib; pathlib.Path({str(out)!r}).write_bytes("
                              "b'0' * 2**23)"], capture_output=True, text=True)
        assert run.returncode != 0, "the 2 MB disk took 8 MB"
        return ValidationReport(passed=False, failure=StepFailure(
            stage="validate", error_type=ErrorType.UNKNOWN, log_tail=run.stderr[-2000:],
            message=f"micro-batch run failed: {run.stderr.strip().splitlines()[-1]}"))


@pytest.mark.parametrize("via_subprocess", [False, True])
def test_a_full_workspace_disk_during_validate_stops_the_session(tmp_path, small_disk, via_subprocess):
    """Old main: each failure was a new code round (UNKNOWN), every loop the same, then ``completed``."""
    scenario = _scenario(tmp_path).model_copy(update={"workspace_root": str(small_disk)})
    validator = WritingValidator(via_subprocess)
    components = Components(proposer=HeuristicProposer(scenario), coder=HeuristicCoder(scenario),
                            validator=validator, trainer=FakeTrainer(), evaluator=FakeEvaluator(),
                            feedback=RecordingFeedback(), data=FakeData())
    workflow = FinetuneWorkflow(scenario, components, coder_max_loop=3, sota_min_delta=0.0,
                                workspace_root=small_disk)
    session = Session.create(tmp_path / "log", state_cls=FinetuneSessionState, scenario=scenario)
    summary = LoopEngine(workflow, session, loop_n=3).run()
    assert summary.status == "env_error" and validator.calls == 1, (summary, validator.calls)
    assert summary.message.startswith(("validation stopped: the disk is full", "the validate step stopped"))
    assert str(small_disk) in summary.message and "GiB free" in summary.message and "--path" in summary.message
    end = [e for e in read_events(session.events_path) if e.type == "session_end"]
    assert [e.status for e in end] == ["env_error"]
