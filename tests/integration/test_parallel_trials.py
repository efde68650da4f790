"""Two trials at once on CPU for real, killed mid-round and resumed (issue 41, "Done when").

The real CLI (``FT_PARALLEL_TRIALS=2``, ``demo_add`` with ``FT_BENCHMARK_LIMIT=20``, ``builtin/tiny-qwen2``, the
heuristic planner, ``--loop-n 2``) runs two trials on two one-core slots. The round's second trial is the
first's with 3× the training steps (the test narrows the offline planner's spread to that one variant), so
when the short trial has finished, the long one is still training: then the session is SIGKILLed. Checked:

* the two trials' ``train`` steps overlapped in time (events), each trial on its own slot;
* within 5 s of the SIGKILL no process of the session is left (every descendant seen while it ran, and
  anything running in its folders);
* ``--path`` resumes it: the long trial starts again at its last committed step (``train``) on a slot, the
  finished one runs no step again, and both end scored with paired intervals; again nothing is left running.

One short session (a probe of 30 steps, 200 training rows): ~6 min on two loaded cores.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ftagent.engine.events import read_events
from tests.integration.test_kill_resume import (
    GONE_WITHIN_S,
    RUN_TIMEOUT_S,
    _descendants,
    _env,
    _in_folders,
    _output,
    _running,
    _sessions,
)
from tests.unit._workflows import saved_done

pytestmark = pytest.mark.integration
PROBE_STEPS = 30
WRAPPER = ("import sys, ftagent.planners.heuristic.policy as p, ftagent.planners.heuristic.spread as s; "
           "p.PROBE_STEPS = int(sys.argv.pop(1)); s.VARIANTS = (('steps', 3.0),); "
           "sys.argv[0] = 'ftagent'; from ftagent.cli.main import main; main()")
COMMAND = ["llm_finetune", "--benchmark", "demo_add", "--base-model", "builtin/tiny-qwen2", "--loop-n", "2",
           "--quiet"]


def _start(root: Path, env: dict[str, str], *args: str) -> subprocess.Popen:
    n = len(list(root.glob("out-*.txt")))
    out = open(root / f"out-{n}.txt", "w", encoding="utf-8")  # noqa: SIM115 - the child writes it
    return subprocess.Popen([sys.executable, "-c", WRAPPER, str(PROBE_STEPS), *args], cwd=root, env=env,
                            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


def _events(session: Path) -> list:
    return list(read_events(session / "events.jsonl"))


def _span(events: list, loop: int, step: str) -> tuple[float, float]:
    start = next(e.ts for e in events if e.type == "step_start" and e.loop == loop and e.step == step)
    end = next(e.ts for e in events if e.type == "step_end" and e.loop == loop and e.step == step)
    return start, end


def test_two_trials_overlap_and_a_sigkill_mid_round_resumes_without_rerunning_the_finished_one(
        tmp_path: Path, tools_env: Path) -> None:
    env = {**_env(tmp_path, tools_env), "FT_PARALLEL_TRIALS": "2", "FT_BENCHMARK_LIMIT": "20",
           "FT_STOP_AT_MAXIMUM": "false"}
    proc = _start(tmp_path, env, *COMMAND)
    seen: dict[int, object] = {}
    deadline = time.monotonic() + RUN_TIMEOUT_S
    session = None
    short = long = None  # which loop trains 3x the steps: whichever proposed second (the threads race)
    while time.monotonic() < deadline:  # the short trial ended (and is in a snapshot), the long one still runs
        assert proc.poll() is None, f"ftagent ended (rc {proc.returncode}) before a trial did:\n{_output(tmp_path)}"
        for child in _descendants(proc.pid):
            seen.setdefault(child.pid, child)
        sessions = _sessions(tmp_path)
        session = sessions[-1] if sessions else None
        events = _events(session) if session else []
        steps = {e.loop: int(re.search(r'"max_steps": (\d+)', e.task).group(1)) for e in events
                 if e.type == "hypothesis" and re.search(r'"max_steps": (\d+)', e.task)}
        if len(steps) == 2:
            short, long = sorted(steps, key=lambda loop: steps[loop])
            assert steps[long] == 3 * steps[short], steps
        ended = {e.loop for e in events if e.type == "loop_end"}
        if short is not None and short in ended and long not in ended and saved_done(session, short):
            break
        assert long is None or long not in ended, "the long trial ended first"
        time.sleep(0.2)
    assert session is not None
    tools = list(seen.values())
    proc.send_signal(signal.SIGKILL)
    t0 = time.monotonic()
    while time.monotonic() - t0 < GONE_WITHIN_S and (_running(tools) or _running(_in_folders(tmp_path))):
        time.sleep(0.1)
    left = _running(tools) + _running(_in_folders(tmp_path))
    assert not left, f"left {GONE_WITHIN_S}s after SIGKILL: {left}"
    proc.wait(timeout=60)

    first = _events(session)
    a0, a1 = _span(first, short, "train")
    b0 = next(e.ts for e in first if e.type == "step_start" and e.loop == long and e.step == "train")
    b1 = next((e.ts for e in first if e.type == "step_end" and e.loop == long and e.step == "train"), float("inf"))
    assert a0 < b1 and b0 < a1, f"the two trials' training did not overlap: loop {short} {a0}-{a1}, loop {long} {b0}-{b1}"
    starts = {e.loop: e.slot for e in first if e.type == "trial_start"}
    assert sorted(starts) == [0, 1] and len(set(starts.values())) == 2, starts

    done = _start(tmp_path, env, "llm_finetune", "--path", str(session), "--quiet")
    assert done.wait(timeout=RUN_TIMEOUT_S) == 0, _output(tmp_path)
    assert not _running(_in_folders(tmp_path))
    events = _events(session)
    resume = max(i for i, e in enumerate(events) if e.type == "session_start")
    after = events[resume:]
    assert not [e for e in after if e.type in ("step_start", "trial_start") and e.loop == short], "the finished ran again"
    (trial,) = [e for e in after if e.type == "trial_start"]
    assert (trial.loop, trial.resumed) == (long, True) and trial.step in ("train", "evaluate", "feedback"), trial
    feedback = {e.loop: e for e in events if e.type == "feedback"}
    assert sorted(feedback) == [0, 1]
    for fb in feedback.values():
        assert fb.score is not None and any(d.has_interval for d in fb.intervals), fb
    assert [e.status for e in events if e.type == "session_end"][-1] in ("completed", "no_progress")
