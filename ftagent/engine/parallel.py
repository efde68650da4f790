"""K loops (trials) at once on one session: the slot scheduler (issue 41).

:class:`~ftagent.engine.loop.LoopEngine` hands the session here when it is given a :class:`SlotPool`
(``FT_PARALLEL_TRIALS`` > 1) or when the session already has loops in flight. The rules:

* **slots** — the pool lends one slot per trial (a GPU set, a share of the cores: the application decides
  what a slot is); a free slot takes the next trial at once. The trial's worker thread calls
  :meth:`SlotPool.bind` first (the local pool pins the thread, and with it every process it starts, to the
  slot's cores). ``--loop-n`` counts trials: no trial starts once ``loop_n`` have started.
* **one shared state** — each trial runs its steps on its own loop state in its own thread; after every
  step the scheduler *commits* it under one lock: the loop's copy in ``state.running`` is replaced, the
  step count goes up and a snapshot of the whole session is written (``<seq>_<step>.<n>``, n the step count:
  the newest snapshot is the highest n, :mod:`ftagent.engine.session`). A snapshot never holds a step half
  done, of any trial.
* **serial steps** — the workflow's ``serial_steps`` (fine-tuning: propose and feedback, the two that read
  and write the shared trace) run one at a time, on a private copy of the session state; their changes to
  the application's part of the state (the trace) are copied back when they commit. A finished trial's
  feedback is in the trace for every proposal after it. Other steps read the live state and write only
  their loop.
* **budgets** — ``timeout`` holds for the session: a step gets the time left (``ctx.limit``), no step starts
  after the deadline, and no trial starts when the time left is shorter than the trials this run finished
  took (median) or when the engine's ``loop_guard`` (the application's re-forecast) says it cannot fit; the
  guard is asked only once every event written so far, by any trial's thread, has reached every subscriber
  (``EventLog.wait_delivered``: a running trial's plan, written and still being handed over when a slot freed,
  is in the guard's view). ``step_n`` counts steps of all trials. ``EnvironmentFailure`` or ``BudgetExhausted`` in any
  trial stops the session; the other trials stop before their next step.
* **interruption** — Ctrl-C or SIGTERM reaches the main thread (the scheduler); it asks the trials to stop,
  calls ``interrupt`` (the application ends the running tool processes) until every worker has left its
  step, and discards those steps: each trial resumes at its last committed step (``--path``), a finished
  trial is never run again.

The events of a trial carry its loop (the worker's :class:`TrialContext`, and :func:`trial_loop` for events
emitted without a context, e.g. a runner's ``run`` event); ``trial_start`` names its slot.
"""

from __future__ import annotations

import queue
import statistics
import threading
from collections.abc import Callable
from typing import Any, Generic, Literal

from ftagent.core.errors import BudgetExhausted, EnvironmentFailure, ErrorType, StepFailure
from ftagent.engine.context import SessionStatus, StepContext, guard_ending
from ftagent.engine.events import LoopEnd, Message, StepEnd, TrialStart, _Event
from ftagent.engine.pools import LocalSlotPool, SlotPool, WholeMachine
from ftagent.engine.session import LoopState, S, Session, SessionState
from ftagent.engine.steps import StepOutcome, run_step

__all__ = ["LocalSlotPool", "Scheduler", "SlotPool", "TrialContext", "WholeMachine", "trial_loop"]

JOIN_GRACE_S = 60.0  # how long an interruption waits for a trial's step to end before giving up on it
_local = threading.local()


def trial_loop() -> int | None:
    """The loop the calling thread works on (a trial's worker), None elsewhere."""
    return getattr(_local, "loop", None)


_Kind = Literal["done", "paused", "stopped"]


class _Stop(Exception):
    """The scheduler asked the trials to stop before their next step (a limit, an error elsewhere)."""


class Scheduler(Generic[S]):
    """Runs a :class:`~ftagent.engine.loop.LoopEngine`'s workflow K loops at once (see the module docstring)."""

    def __init__(self, engine: Any, pool: SlotPool, *, interrupt: Callable[[], None] | None = None) -> None:
        """``engine``: the :class:`~ftagent.engine.loop.LoopEngine` whose session, workflow and budgets these are
        (not imported, not even for its type: the engine imports this module; its session types ``S``)."""
        self.engine, self.pool, self.interrupt = engine, pool, interrupt
        self.session: Session[S] = engine.session
        self.workflow = engine.workflow
        self.state: S = self.session.state
        self.steps = list(self.workflow.steps())
        self.serial = set(getattr(self.workflow, "serial_steps", ()))
        self._lock = threading.RLock()  # the shared state: commits and snapshots
        self._serial = threading.Lock()  # one serial step at a time
        self._done: queue.Queue[tuple[int, _Kind, BaseException | None]] = queue.Queue()
        self._stop = threading.Event()  # no step starts any more
        self._killed = threading.Event()  # the running steps' commands were ended: their results are discarded
        self._workers: dict[int, threading.Thread] = {}
        self._slots: dict[int, Any] = {}
        self._trial_s: list[float] = []  # wall seconds of the trials this run finished
        self._started: dict[int, float] = {}
        self.steps_run = 0
        self.failures: list[StepFailure] = []
        self.loop_failures: list[StepFailure | None] = []

    # -- the main thread ------------------------------------------------------------------------------
    def run(self, ctx: StepContext[S]) -> tuple[SessionStatus, str]:
        """Run until a stop condition; returns ``(status, message)`` (the engine ends the session)."""
        self.ctx = ctx
        self.state.ordered_snapshots = True
        self._adopt_current()
        pending = list(self.state.running)  # in flight when the session was saved: each resumes its own
        status: SessionStatus | None = None
        message = ""
        try:
            while True:
                pending = self._start_trials(pending)
                if not self._workers and not (self._asked_for_slot(pending) and not self._stop.is_set()):
                    break
                try:
                    index, kind, exc = self._done.get(timeout=0.5)
                except queue.Empty:
                    continue
                self._reap(index)
                if isinstance(exc, EnvironmentFailure) and status is None:
                    status, message = "env_error", str(exc)
                elif isinstance(exc, BudgetExhausted) and status is None:
                    status, message = "budget", str(exc)
                elif exc is not None and status is None:  # a bug in the scheduler's own bookkeeping
                    status, message = "env_error", f"trial {index}: {type(exc).__name__}: {exc}"
                if status is not None:  # the session stops now: the other trials resume later where they were
                    self._stop_all()
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGHUP ("terminated by SIGTERM")
            status, message = "interrupted", str(exc) or "interrupted by the user"
            self._stop_all()
        finally:
            getattr(self.pool, "close", lambda: None)()  # a pool that holds leases (Ray) gives them back
        return (status, message) if status is not None else self._why_stopped()

    def _why_stopped(self) -> tuple[SessionStatus, str]:
        e = self.engine
        if e.step_n is not None and self.steps_run >= e.step_n:
            return "step_limit", f"step limit {e.step_n} reached"
        if self.state.running:  # trials left in flight without a limit above: the time ran out
            return "timeout", f"time budget of {e.timeout_s or 0:.0f}s used up"
        if e.loop_n is not None and self.state.loop_index >= e.loop_n:
            return "completed", f"{self.state.loop_index} trial(s) done"
        if self.ctx.deadline is not None and e.clock() >= self.ctx.deadline:
            return "timeout", f"time budget of {e.timeout_s or 0:.0f}s used up"
        guarded = getattr(self, "_guarded", None)  # the application's guard kept the next trial from starting
        if guarded:  # e.g. saturated (a Halt: the best is at the metric's maximum) or a re-forecast's reason
            return guard_ending(guarded)
        return "timeout", f"time budget of {e.timeout_s or 0:.0f}s left too little for another trial"

    def _adopt_current(self) -> None:
        """A session saved by the one-at-a-time engine mid-loop: its current loop becomes a trial in flight."""
        st = self.state
        cur = st.current
        if cur is not None and cur.index == st.loop_index and st.step_index > 0:
            cur.next_step = st.step_index
            st.running = [*st.running, cur]
            st.loop_index += 1
        st.current, st.step_index = None, 0

    def _start_trials(self, pending: list[LoopState]) -> list[LoopState]:
        """Give free slots to the resumed trials first, then to new ones while the budgets allow."""
        while not self._stop.is_set():
            if pending:
                loop = pending[0]
                slot = self.pool.acquire(loop.slot)
                if slot is None:
                    break
                pending = pending[1:]
            else:
                if not self._may_start():
                    break
                slot = self.pool.acquire()
                if slot is None:
                    break
                with self._lock:
                    loop = self.workflow.new_loop(self.state.loop_index)
                    self.state.loop_index += 1
                    self.state.running = [*self.state.running, loop.model_copy(deep=True)]
            self._launch(loop, slot)
        return pending

    def _asked_for_slot(self, pending: list[LoopState]) -> bool:
        """A trial waits for a slot the pool was asked for but has not lent yet (a Ray lease Ray has not granted:
        Ray has no GPU free now): keep waiting, and say so once."""
        waiting = bool(getattr(self.pool, "waiting", lambda: False)()) and (bool(pending) or self._may_start())
        if waiting and not getattr(self, "_said_waiting", False):
            self._said_waiting = True
            self.ctx.emit(Message(text="waiting for a slot: the pool has none free now (Ray: no GPU free on this node)"))
        return waiting

    def _may_start(self) -> bool:
        e = self.engine
        if e.loop_n is not None and self.state.loop_index >= e.loop_n:
            return False
        if e.step_n is not None and self.steps_run >= e.step_n:
            return False
        guard = getattr(e, "loop_guard", None)  # the application's reason not to start a loop (a re-forecast)
        why = None
        if guard is not None:
            # the guard reads a subscriber's view of the log (the re-forecaster's): a trial's thread may have written
            # its plan (the validation event) and not yet handed it over when this slot freed; wait for it
            self.session.events.wait_delivered()
            why = guard(self.ctx)
        if why:
            self._guarded = why
            return False
        left = self.ctx.time_left()
        if left is None:
            return True
        if left <= 0:
            return False
        if self._trial_s and left < statistics.median(self._trial_s):
            if not getattr(self, "_said_no_time", False):
                self._said_no_time = True
                self.ctx.emit(Message(text=f"no new trial: {left:.0f} s left, a trial took "
                                           f"{statistics.median(self._trial_s):.0f} s (median)"))
            return False
        return True

    def _launch(self, loop: LoopState, slot: Any) -> None:
        loop.slot = getattr(slot, "index", None)
        with self._lock:
            self._commit_loop(loop)
        self._slots[loop.index] = slot
        self._started[loop.index] = self.engine.clock()
        self.ctx.emit(TrialStart(loop=loop.index, slot=loop.slot, slot_label=str(getattr(slot, "label", loop.slot)),
                                 step=self.steps[loop.next_step][0], resumed=loop.next_step > 0))
        worker = threading.Thread(target=self._work, args=(loop, slot), name=f"trial-{loop.index}", daemon=True)
        self._workers[loop.index] = worker
        worker.start()

    def _reap(self, index: int) -> None:
        worker = self._workers.pop(index, None)
        if worker is not None:
            worker.join(timeout=5.0)
        slot = self._slots.pop(index, None)
        if slot is not None:
            self.pool.release(slot)

    def _stop_all(self) -> None:
        """End every running step now (its commands killed, its result discarded) and wait for the workers."""
        self._stop.set()
        self._killed.set()
        deadline = self.engine.clock() + JOIN_GRACE_S
        while self._workers and self.engine.clock() < deadline:
            if self.interrupt is not None:
                self.interrupt()  # a step may start a new command after the last kill: end it too
            try:
                index, _kind, _exc = self._done.get(timeout=0.5)
            except queue.Empty:
                continue
            self._reap(index)

    # -- a trial's worker thread ------------------------------------------------------------------------
    def _work(self, loop: LoopState, slot: Any) -> None:
        _local.loop = loop.index
        kind: _Kind = "stopped"
        error: BaseException | None = None
        try:
            self.pool.bind(slot)
            kind = self._run_trial(loop)
        except _Stop:
            kind = "stopped"
        except BaseException as exc:  # noqa: BLE001 - reported to the scheduler, which ends the session
            error = exc
        finally:
            self._done.put((loop.index, kind, error))

    def _run_trial(self, loop: LoopState) -> _Kind:
        while True:
            self._reserve_step()
            seq = loop.next_step
            name = self.steps[seq][0]
            serial = name in self.serial
            if serial:
                self._enter_serial()
            try:
                with self._lock:
                    view = self.state.model_copy(deep=True) if serial else self.state
                ctx = TrialContext(self, view, loop)
                try:
                    out = run_step(self.workflow, self.steps, ctx, loop, seq, self.engine.clock, self.session.dir)
                except (EnvironmentFailure, BudgetExhausted):
                    raise
                except KeyboardInterrupt as exc:  # a stop that reached this thread: the step is discarded
                    raise _Stop from exc
                if self._killed.is_set():  # stopped meanwhile: its commands were killed, its result is not one
                    ctx.emit(StepEnd(step=name, status="failed", duration_s=out.took, failure=StepFailure(
                        stage=name, error_type=ErrorType.INTERRUPTED, message="stopped: the session was interrupted")))
                    raise _Stop()
                with self._lock:
                    if serial:
                        self._copy_back(view)
                    done = self._commit(ctx, loop, out)
            finally:
                if serial:
                    self._serial.release()
            if done:
                return "done"

    def _reserve_step(self) -> None:
        with self._lock:
            e = self.engine
            if self._stop.is_set() or (e.step_n is not None and self.steps_run >= e.step_n):
                raise _Stop()
            if self.ctx.deadline is not None and e.clock() >= self.ctx.deadline:
                raise _Stop()
            self.steps_run += 1

    def _enter_serial(self) -> None:
        while not self._serial.acquire(timeout=0.5):
            if self._stop.is_set():
                raise _Stop()

    def _copy_back(self, view: S) -> None:
        """A serial step's changes to the application's part of the state (fields the engine does not own)."""
        for name in type(self.state).model_fields:
            if name not in SessionState.model_fields:
                setattr(self.state, name, getattr(view, name))

    def _commit(self, ctx: StepContext[S], loop: LoopState, out: StepOutcome) -> bool:
        """Record a finished step (under the lock): events, the loop's copy, counters, the snapshot."""
        st = self.state
        if out.status == "failed" and out.failure is not None:
            self.failures.append(out.failure)
        ctx.emit(out.end_event())
        loop.next_step = out.next_seq
        st.steps_done += 1
        st.last_step = out.name
        done = out.next_seq >= len(self.steps)
        if done:
            self.loop_failures.append(loop.failure)
            ctx.emit(LoopEnd(status="failed" if loop.failure else "succeeded", duration_s=loop.running_s,
                             is_sota=self.workflow.is_best_loop(st, loop.index)))
            st.running = [x for x in st.running if x.index != loop.index]
            self._trial_s.append(self.engine.clock() - self._started.get(loop.index, self.engine.clock()))
        else:
            self._commit_loop(loop)
        st.event_count = self.engine.events.count()
        start, elapsed_before = self.engine._time_base
        st.elapsed_s = elapsed_before + (self.engine.clock() - start)
        self.session.save(loop.index, out.seq, out.name, order=st.steps_done)
        return done

    def _commit_loop(self, loop: LoopState) -> None:
        copy = loop.model_copy(deep=True)
        running = [x for x in self.state.running if x.index != loop.index] + [copy]
        self.state.running = sorted(running, key=lambda x: x.index)

    def peers(self, index: int) -> list[LoopState]:
        """The other trials in flight, as last committed (copies)."""
        with self._lock:
            return [x.model_copy(deep=True) for x in self.state.running if x.index != index]


class TrialContext(StepContext[S]):
    """A trial's :class:`~ftagent.engine.loop.StepContext`: its own loop and slot, the session's deadline."""

    def __init__(self, scheduler: Scheduler[S], state: S, loop: LoopState) -> None:
        super().__init__(scheduler.session, scheduler.engine.events, scheduler.ctx.deadline, scheduler.engine.clock)
        self._scheduler, self._state, self._loop = scheduler, state, loop
        self.slot = scheduler._slots.get(loop.index)

    @property
    def state(self) -> S:
        return self._state

    @property
    def loop(self) -> LoopState:
        return self._loop

    def emit(self, event: _Event) -> None:
        if event.loop is None:
            event.loop = self._loop.index
        self.events.emit(event)

    def peers(self) -> list[LoopState]:
        """The other trials in flight (their committed state): what they propose, how far they are."""
        return self._scheduler.peers(self._loop.index)

    def trials_at_once(self) -> int:
        """K: how many trials run at once (the pool's slots), which the prompts say (relay round r2)."""
        return int(self._scheduler.pool.size)
