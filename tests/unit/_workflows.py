"""Test-only workflows for the loop engine (the real steps live in ftagent.finetune.workflow)."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import Field

from ftagent.core.errors import EnvironmentFailure, ErrorType, StepError
from ftagent.core.trace import Experiment, Trace
from ftagent.engine.loop import Goto, StepContext
from ftagent.engine.session import LoopState, SessionState

STEPS = ["propose", "code", "validate", "train", "evaluate", "feedback"]


class RecordedLoop(LoopState):
    """A test loop state: each step's return value, by step name."""

    results: dict[str, Any] = Field(default_factory=dict)


class TraceState(SessionState):
    """A test session state with a trace (the engine itself knows none)."""

    current: RecordedLoop | None = None
    running: Sequence[RecordedLoop] = Field(default_factory=list)  # K trials at once (ftagent.engine.parallel)
    trace: Trace = Field(default_factory=Trace)


class RecordingWorkflow:
    """Records every step call; behaviour per (loop, step) is scripted with ``plan``.

    plan values: "fail" (StepError), "crash" (plain exception), "env" (EnvironmentFailure),
    "goto:<step>" (jump back), "sleep:<s>" (sleep then succeed), "deadline" (record ctx.time_left()).

    ``waits`` orders trials running at once by events, not sleeps (a loaded machine must not decide the order):
    ``{(1, "code"): (0, "train", "start")}`` — loop 1's code step begins once loop 0's training has begun
    (``"end"``: once it has ended, a subclass's wrapping included). :meth:`reached` is each such event.
    """

    feedback_step = "feedback"

    def __init__(self, plan: dict | None = None, goto_cap: int = 2, log: Path | None = None,
                 waits: dict[tuple[int, str], tuple[int, str, str]] | None = None) -> None:
        self.plan = plan or {}
        self.goto_caps = {"code": goto_cap}
        self.calls: list[tuple[int, str]] = []
        self.deadlines: list[float | None] = []
        self.log = log
        self.waits = waits or {}
        self._reached: dict[tuple[int, str, str], threading.Event] = {}
        self._reached_lock = threading.Lock()

    def reached(self, loop: int, step: str, when: str = "start") -> threading.Event:
        """Set once ``loop``'s ``step`` has begun (``when="start"``) or ended (``"end"``)."""
        with self._reached_lock:
            return self._reached.setdefault((loop, step, when), threading.Event())

    def steps(self):
        return [(name, self._ordered(name, self._make(name))) for name in STEPS]

    def _ordered(self, name: str, inner):
        """``inner`` (a subclass's wrapping included) after its ``waits`` entry; marks its start and end."""

        def step(ctx: StepContext):
            loop = ctx.loop.index
            after = self.waits.get((loop, name))
            if after is not None and not self.reached(*after).wait(60):
                raise AssertionError(f"loop {loop}'s {name} waited 60 s for {after}")
            self.reached(loop, name, "start").set()
            try:
                return inner(ctx)
            finally:
                self.reached(loop, name, "end").set()

        return step

    def new_loop(self, index: int) -> RecordedLoop:
        return RecordedLoop(index=index)

    def is_best_loop(self, state: TraceState, index: int) -> bool:
        return state.trace.sota_loop == index

    def produced_result(self, state) -> bool:
        return any(e.val_score is not None for e in state.trace.experiments)

    def _make(self, name: str):
        def step(ctx: StepContext):
            loop = ctx.loop.index
            self.calls.append((loop, name))
            if self.log:
                with open(self.log, "a") as fh:
                    fh.write(json.dumps([loop, name, os.getpid()]) + "\n")
            action = self.plan.get((loop, name), "")
            if action == "fail":
                raise StepError("scripted failure", error_type=ErrorType.CONFIG, log_tail="bad key")
            if action == "crash":
                raise RuntimeError("boom")
            if action == "env":
                raise EnvironmentFailure("no runner")
            if action.startswith("goto:") and ctx.loop.gotos.get(action[5:], 0) < 99:
                return Goto(action[5:], reason="scripted")
            if action.startswith("sleep:"):
                time.sleep(float(action[6:]))
            if action == "deadline":
                self.deadlines.append(ctx.time_left())
            if name == "feedback":
                score = float(loop)
                exp = Experiment(loop=loop, val_score=None if ctx.loop.failure else score,
                                 failure=ctx.loop.failure)
                exp.decision = exp.failure is None and ctx.state.trace.is_new_sota(score, 0.0)
                ctx.state.trace.record(exp)
                ctx.loop.results[name] = {"decision": exp.decision}
                return None
            ctx.loop.results[name] = {"step": name, "loop": loop}
            return None

        return step


def saved_done(session_dir: Path, loop: int) -> bool:
    """Whether the session's newest snapshot holds ``loop``'s experiment (its feedback committed, not only called)."""
    from ftagent.engine.session import list_snapshots

    snaps = list_snapshots(session_dir)
    try:
        state = json.loads(snaps[-1].read_text(encoding="utf-8")) if snaps else {}
    except (OSError, ValueError):
        return False
    return any(e.get("loop") == loop for e in (state.get("trace") or {}).get("experiments", []))
