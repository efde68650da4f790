"""Issue 34 item 12: how an interrupted or environment-stopped run ends, through the real CLI.

The child is the real ``ftagent llm_finetune`` command (``ftagent.cli.main.main``) whose ``run_finetune``
is a stand-in doing what the real one does around the loop: ``begin_run`` (SIGTERM handling), the loop
engine over a session, the report. A real SIGTERM / SIGINT is sent during the train step.

Before: SIGTERM exited 0; the loop's row said ``running: [train/UNKNOWN] …``; a full disk's advice was
cut at 300 characters on the console and printed nowhere whole.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ftagent.views.report import build_report

REPO = Path(__file__).resolve().parents[2]
CHILD = r'''
import signal
import sys

# Ctrl-C as a terminal gives it: a parent started in the background without job control (`cmd &` in a
# script, nohup, some CI runners, pytest-xdist workers under them) hands SIGINT down ignored, and Python
# then installs no KeyboardInterrupt handler, so the signal this test sends would be dropped (a 60 s hang).
signal.signal(signal.SIGINT, signal.default_int_handler)
from pathlib import Path
from types import SimpleNamespace

import ftagent.finetune.app as app
from ftagent.core.disk import check_disk_full
from ftagent.engine.loop import LoopEngine
from ftagent.engine.session import Session
from ftagent.finetune.lifecycle import begin_run
from ftagent.views.report import write_report
from tests.unit._workflows import RecordingWorkflow, TraceState

root, mode = Path(sys.argv[1]), sys.argv[2]


class Workflow(RecordingWorkflow):
    def _make(self, name):
        step = super()._make(name)
        if name != "train":
            return step

        def train(ctx):
            (root / "training").write_text("x")
            if mode == "disk_full":
                check_disk_full("OSError: [Errno 28] No space left on device", "training", [root])
            step(ctx)
        return train


def run_finetune(options):
    end = begin_run(SimpleNamespace(ft=SimpleNamespace(file_path=root / "ft", env_type="local")), lambda e: None)
    try:
        session = Session.create(root / "log", state_cls=TraceState)
        (root / "session").write_text(str(session.dir))
        return LoopEngine(Workflow(plan={(0, "train"): "sleep:300"}), session, loop_n=1).run()
    finally:
        end()
        write_report(session.dir)


app.run_finetune = run_finetune
sys.argv = ["ftagent", "llm_finetune", "--benchmark", "demo_add", "--base-model", "builtin/tiny-qwen2"]
from ftagent.cli.main import main

main()
'''


def _start(tmp_path: Path, mode: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "LOG_PATH": str(tmp_path / "log"),
           "FT_FILE_PATH": str(tmp_path / "ft"), "WORKSPACE_PATH": str(tmp_path / "ws")}
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path), mode], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "training").exists():
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    return proc


@pytest.mark.parametrize("sig, code, message", [(signal.SIGTERM, 143, "terminated by SIGTERM"),
                                                (signal.SIGINT, 130, "interrupted by the user")])
def test_a_signal_exits_128_plus_its_number_and_the_loop_says_interrupted(tmp_path, sig, code, message):
    proc = _start(tmp_path, "sleep")
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err[-2000:]
    report = build_report(Path((tmp_path / "session").read_text()))
    assert report.status == "interrupted" and report.end_message == message
    (row,) = report.loops
    assert row.status == "interrupted" and row.failure == f"[train/INTERRUPTED] {message}"


def test_a_full_disk_is_an_env_failure_whose_advice_is_printed_whole(tmp_path):
    proc = _start(tmp_path, "disk_full")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err[-2000:]
    report = build_report(Path((tmp_path / "session").read_text()))
    (row,) = report.loops
    assert row.status == "env_error" and row.failure.startswith("[train/ENV] training stopped: the disk is full")
    advice = report.end_message
    assert len(advice) > 300 and advice.endswith("or point WORKSPACE_PATH at a larger disk.")
    assert advice in " ".join(err.split())  # printed whole (the console wraps it; the words are all there)
    md = (Path(report.session_dir) / "report.md").read_text()
    assert f"- ended: {advice}" in md
    assert json.loads((Path(report.session_dir) / "report.json").read_text())["end_message"] == advice
