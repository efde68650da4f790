"""The loop engine: runs a workflow's steps in order, loop after loop, with budgets and resume.

A *workflow* is an ordered list of named steps plus the name of its feedback step. The engine:

* runs steps in order; after the last step of a loop the next loop starts;
* stops on ``loop_n`` (total loops in the session), ``step_n`` (steps in this invocation) or the
  wall-clock ``timeout`` (checked between steps and handed to every step as a deadline); before a loop
  starts it asks ``loop_guard`` (the fine-tuning app's re-forecast: a loop that cannot finish before the
  deadline is not started, and the session ends ``timeout``, issue 43; a guard's :class:`Halt` ends it with
  the Halt's status: ``saturated`` when the best scores the metric's maximum and no later loop can replace it);
* lets a step return :class:`Goto` to jump back (validate → code) at most ``goto_caps[target]``
  times per loop; past the cap the loop fails and goes to feedback;
* turns any exception from a step into a :class:`StepFailure` and jumps to the feedback step; only
  :class:`EnvironmentFailure` (and a failing feedback step) stops the session. A step that failed on a
  full disk (``ENOSPC``/``EDQUOT``, in the exception or its log) stops it too, whatever the step: the next
  step or loop would write to the same disk (:func:`ftagent.core.disk.check_disk_full`, the workflow's
  ``disk_folders`` named with their free space);
* snapshots the session after every step and writes typed events;
* ends ``no_progress`` (not ``completed``) when every loop it ran failed for a cause the planner cannot
  change: each loop's failure is ``ENV``, or two or more loops failed with the same cause
  (:func:`no_progress`). The CLI exits 3 then: a batch job never records such a session as a success;
* ends ``no_model`` (not ``completed``, ``timeout`` or ``budget``) when no loop of the whole session
  produced a scored result (the workflow's ``produced_result``): the loops ran out of time, budget or
  loops before any candidate was scored (issue 43: a timeout during loop 0 ended ``timeout``, exit 0).
  The message says why; the CLI exits 4. A ``step_limit`` stop is a pause the user asked for and stays.

Steps keep what they produce in the typed loop state the workflow defines (``ctx.loop``, created by
``workflow.new_loop``); the engine only keeps the loop's index, failure and jumps back.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from ftagent.core.errors import BudgetExhausted, EnvironmentFailure, ErrorType, StepFailure
from ftagent.engine.context import Goto, Halt, SessionStatus, StepContext, StepFn, guard_ending
from ftagent.engine.events import LoopEnd, Message, SessionEnd
from ftagent.engine.session import LoopState, S, Session, SessionState
from ftagent.engine.steps import run_step

if TYPE_CHECKING:
    from ftagent.engine.parallel import SlotPool

# what a step sees and returns lives in engine/context.py (the parallel scheduler shares it); named here too
__all__ = ["Goto", "LoopEngine", "RunSummary", "SessionStatus", "StepContext", "StepFn", "Workflow", "no_model",
           "no_progress"]

#: the endings that are no success when the session has no scored result: they become ``no_model``
_NEEDS_A_RESULT = ("completed", "timeout", "budget")


S_contra = TypeVar("S_contra", bound=SessionState, contravariant=True)


class Workflow(Protocol[S_contra]):
    """An ordered set of steps over sessions whose state is an ``S_contra``; ``ftagent.finetune.workflow``
    has the real one (``Workflow[FinetuneSessionState]``)."""

    feedback_step: str
    goto_caps: dict[str, int]

    def steps(self) -> Sequence[tuple[str, StepFn[S_contra]]]: ...

    def new_loop(self, index: int) -> LoopState:
        """The typed state of loop ``index`` (the engine keeps it as ``state.current``)."""
        ...

    def is_best_loop(self, state: S_contra, index: int) -> bool:
        """Whether loop ``index`` is the session's best so far (``LoopEnd.is_sota``)."""
        ...

    def produced_result(self, state: S_contra) -> bool:
        """Whether any loop of the session (a resumed one's earlier runs included) produced a scored result;
        a session without one ends ``no_model``, never as a success."""
        ...


@dataclass
class RunSummary:
    status: SessionStatus
    loops_done: int
    steps_run: int
    message: str = ""
    failures: list[StepFailure] = field(default_factory=list)


def _cause(failure: StepFailure) -> str:
    """A failure without its numbers and paths: two loops failing alike have the same cause."""
    text = re.sub(r"/\S*", "<path>", f"{failure.stage}/{failure.error_type.value} {failure.message}".lower())
    return re.sub(r"\d+(\.\d+)?", "#", text)[:300]


def no_progress(loop_failures: Sequence[StepFailure | None]) -> str | None:
    """Why a session that ran these loops made no progress the planner could make, or None.

    ``loop_failures``: each finished loop's failure (None = the loop succeeded). No progress: at least one
    loop, none succeeded, and every failure is ``ENV`` (the environment, not the plan) or every one of two
    or more loops failed with the same cause (a bad input file, a full device: what a new plan cannot fix).
    """
    if not loop_failures or any(f is None for f in loop_failures):
        return None
    failures = [f for f in loop_failures if f is not None]
    same = len(failures) >= 2 and len({_cause(f) for f in failures}) == 1
    if not same and not all(f.error_type is ErrorType.ENV for f in failures):
        return None
    why = "with the same cause" if same else "on the environment (ENV)"
    return (f"no progress: all {len(failures)} loop(s) failed {why}: {failures[-1].summary()[:600]}. A new plan "
            "cannot change it: fix the input or the environment it names, then resume with --path <session>")


def no_model(status: str, message: str, failures: Sequence[StepFailure]) -> str:
    """The ``no_model`` message of a session that ended ``status`` without a scored result: how it ended and
    the last failure (what kept the loops from a result)."""
    how = {"completed": "its loops ended", "timeout": "it ran out of time", "budget": "its LLM budget ran out"}
    last = f"; the last failure: {failures[-1].summary()[:600]}" if failures else ""
    return (f"no model: no loop produced a scored model, so the session has nothing to show ({how.get(status, status)}: "
            f"{message}){last}. Give it more time (--timeout) or loops (--loop-n) and resume with --path <session>, "
            "or fix what the failure names")


class LoopEngine(Generic[S]):
    """Drives a :class:`Workflow` over a :class:`Session` whose state both type as ``S``."""

    def __init__(
        self,
        workflow: Workflow[S],
        session: Session[S],
        *,
        loop_n: int | None = None,
        step_n: int | None = None,
        timeout_s: float | None = None,
        clock: Callable[[], float] = time.time,
        finish: Callable[[StepContext[S]], None] | None = None,
        loop_guard: Callable[[StepContext[S]], str | Halt | None] | None = None,
        pool: SlotPool | None = None,
        interrupt: Callable[[], None] | None = None,
    ) -> None:
        self.workflow = workflow
        self.pool = pool  # K trials at once (ftagent.engine.parallel); None: one loop at a time
        self.interrupt = interrupt  # ends the running tool processes when trials at once are interrupted
        self.finish = finish  # run once before session_end when the loops completed (a final evaluation)
        # asked before a loop starts: a reason not to start it (it cannot finish before --timeout: ends ``timeout``;
        # a Halt: ends with the Halt's status, e.g. ``saturated``), or None
        self.loop_guard = loop_guard
        self.session = session
        self.events = session.events
        self.loop_n = loop_n
        self.step_n = step_n
        self.timeout_s = timeout_s
        self.clock = clock
        self._loop_failures: list[StepFailure | None] = []  # each loop this run finished: its failure
        self._steps = list(workflow.steps())
        self._names = [name for name, _ in self._steps]
        if workflow.feedback_step not in self._names:
            raise ValueError(f"feedback step '{workflow.feedback_step}' is not a step of the workflow")

    def _index(self, name: str) -> int:
        return self._names.index(name)

    def run(self) -> RunSummary:
        """Run until a stop condition; returns why it stopped. Snapshots after every step."""
        state = self.session.state
        start = self.clock()
        elapsed_before = state.elapsed_s
        self._time_base = (start, elapsed_before)
        deadline = None if self.timeout_s is None else start + self.timeout_s - elapsed_before
        ctx = StepContext(self.session, self.events, deadline, self.clock)
        failures: list[StepFailure] = []
        if self.pool is not None or state.running:  # K trials at once, or a session saved with trials in flight
            from ftagent.engine.parallel import LocalSlotPool, Scheduler, WholeMachine

            pool = self.pool or LocalSlotPool([WholeMachine()])
            sched: Scheduler[S] = Scheduler(self, pool, interrupt=self.interrupt)
            try:
                status, message = sched.run(ctx)
            finally:
                state.elapsed_s = elapsed_before + (self.clock() - start)
            steps_run, failures, self._loop_failures = sched.steps_run, sched.failures, sched.loop_failures
        else:
            status, message, steps_run = self._run_sequential(ctx, failures)
        status, message = self._conclude(ctx, status, message, failures)
        self.events.emit(SessionEnd(status=status, message=message))
        return RunSummary(status, state.loop_index - len(state.running), steps_run, message, failures)

    def _run_sequential(self, ctx: StepContext[S], failures: list[StepFailure]) -> tuple[SessionStatus, str, int]:
        """One loop at a time: ``(status, message, steps run)``."""
        state = self.session.state
        start, elapsed_before = self._time_base
        deadline = ctx.deadline
        steps_run = 0
        status: SessionStatus = "completed"
        message = ""
        while True:
            if self.loop_n is not None and state.loop_index >= self.loop_n:
                status, message = "completed", f"{state.loop_index} loop(s) done"
                break
            if self.step_n is not None and steps_run >= self.step_n:
                status, message = "step_limit", f"step limit {self.step_n} reached"
                break
            if deadline is not None and self.clock() >= deadline:
                status, message = "timeout", f"time budget of {self.timeout_s:.0f}s used up"
                break
            if state.step_index == 0 and self.loop_guard is not None:
                self.events.wait_delivered()  # the guard reads a subscriber's view: every event written so far
                why = self.loop_guard(ctx)
                if why:
                    status, message = guard_ending(why)
                    break
            if state.current is None or state.current.index != state.loop_index:
                state.current = self.workflow.new_loop(state.loop_index)
            try:
                self._run_one_step(ctx, failures)
            except EnvironmentFailure as exc:
                status, message = "env_error", str(exc)
                break
            except BudgetExhausted as exc:
                status, message = "budget", str(exc)
                break
            except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGHUP ("terminated by SIGTERM")
                status, message = "interrupted", str(exc) or "interrupted by the user"
                break
            finally:
                state.elapsed_s = elapsed_before + (self.clock() - start)
            steps_run += 1
        return status, message, steps_run

    def _conclude(self, ctx: StepContext[S], status: SessionStatus, message: str,
                  failures: list[StepFailure]) -> tuple[SessionStatus, str]:
        """How the session ends (no progress, no model) and the finish step (a final evaluation)."""
        state = self.session.state
        start, elapsed_before = self._time_base
        stuck = no_progress(self._loop_failures) if status == "completed" else None
        if stuck is not None:
            status, message = "no_progress", stuck
        elif status in _NEEDS_A_RESULT and not self.workflow.produced_result(state):
            status, message = "no_model", no_model(status, message, failures)
        if self.finish is not None and status in ("completed", "no_progress", "saturated"):
            try:
                self.finish(ctx)
            except KeyboardInterrupt as exc:
                status, message = "interrupted", str(exc) or "interrupted by the user"
            except Exception as exc:  # noqa: BLE001 - the loops' results stand; the finish step only adds
                self.events.emit(Message(level="warning", text=f"{type(exc).__name__}: {exc}"[:500]))
            finally:
                state.elapsed_s = elapsed_before + (self.clock() - start)
        return status, message

    def _run_one_step(self, ctx: StepContext[S], failures: list[StepFailure]) -> None:
        state = self.session.state
        loop = state.current
        assert loop is not None
        seq = state.step_index
        out = run_step(self.workflow, self._steps, ctx, loop, seq, self.clock, self.session.dir)
        if out.failure is not None and out.status == "failed":
            failures.append(out.failure)
        ctx.emit(out.end_event())
        state.steps_done += 1
        state.last_step = out.name
        state.step_index = out.next_seq
        if out.next_seq >= len(self._steps):
            self._loop_failures.append(loop.failure)
            sota = self.workflow.is_best_loop(state, loop.index)
            ctx.emit(LoopEnd(status="failed" if loop.failure else "succeeded",
                             duration_s=loop.running_s, is_sota=sota))
            state.loop_index += 1
            state.step_index = 0
            state.current = None
        state.event_count = self.events.count()
        start, elapsed_before = self._time_base
        state.elapsed_s = elapsed_before + (self.clock() - start)
        self.session.save(loop.index, seq, out.name,
                          order=state.steps_done if state.ordered_snapshots else None)
