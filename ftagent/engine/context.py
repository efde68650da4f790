"""What a step sees and returns, shared by both engines (:mod:`ftagent.engine.loop` one loop at a time,
:mod:`ftagent.engine.parallel` K at once): :class:`StepContext`, :class:`Goto`, the session's end statuses."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from ftagent.core.errors import ErrorType
from ftagent.engine.event_log import EventLog
from ftagent.engine.events import _Event
from ftagent.engine.session import LoopState, S, Session, SessionState

SessionStatus = Literal["completed", "timeout", "step_limit", "budget", "env_error", "interrupted", "no_progress",
                        "no_model", "saturated"]


@dataclass(frozen=True)
class Halt:
    """A loop guard's answer that ends the session with a status of its own (not ``timeout``): ``saturated``, the
    best scores the metric's maximum so no later loop can replace it (the fine-tuning app's
    :func:`ftagent.finetune.saturation.saturation_guard`). The loops in flight finish; the finish step runs."""

    status: SessionStatus
    message: str


def guard_ending(why: str | Halt) -> tuple[SessionStatus, str]:
    """How a loop guard's answer ends the session, in both engines: a :class:`Halt` with its own status, any other
    reason (a re-forecast that says the next loop cannot finish) as ``timeout``."""
    return (why.status, why.message) if isinstance(why, Halt) else ("timeout", why)


@dataclass
class Goto:
    """Returned by a step to send the loop back to an earlier step (why: in the loop state)."""

    step: str
    reason: str = ""
    error_type: ErrorType | None = None  # the type of what sent it back: the loop's failure past the cap


#: the session's state class as a step sees it. Covariant: a step that reads only the engine's fields (a
#: planner's, typed ``StepContext[SessionState]``) accepts a fine-tuning session's context; steps never
#: replace ``ctx.session`` or its state.
S_co = TypeVar("S_co", bound=SessionState, covariant=True)


class StepContext(Generic[S_co]):
    """What a step gets: the session, the current loop, the event log and the deadline."""

    def __init__(self, session: Session[S_co], events: EventLog, deadline: float | None,
                 clock: Callable[[], float]) -> None:
        self.session = session
        self.events = events
        self.deadline = deadline
        self._clock = clock

    @property
    def state(self) -> S_co:
        """The session's state, typed as the workflow's own :class:`SessionState` subclass."""
        return self.session.state

    @property
    def loop(self) -> LoopState:
        assert self.session.state.current is not None
        return self.session.state.current

    def time_left(self) -> float | None:
        """Seconds until the session deadline (None when there is no timeout)."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - self._clock())

    def limit(self, seconds: float) -> float:
        """``seconds`` capped by the session deadline: the timeout to give a subprocess."""
        left = self.time_left()
        return seconds if left is None else min(seconds, left)

    def emit(self, event: _Event) -> None:
        """Write an event tagged with the current loop."""
        if event.loop is None and self.session.state.current is not None:
            event.loop = self.session.state.current.index
        self.events.emit(event)


#: one step of a workflow whose sessions hold an ``S`` (``StepFn[FinetuneSessionState]``)
StepFn = Callable[[StepContext[S]], Any]
