"""The single way a session's events reach ``events.jsonl``, before and after the session exists."""

from __future__ import annotations

from collections.abc import Callable

from ftagent.engine.events import SessionEnd, _Event
from ftagent.engine.parallel import trial_loop
from ftagent.engine.session import Session
from ftagent.finetune.state import FinetuneSessionState


class SessionEmitter:
    """The single way events reach ``events.jsonl``.

    Events emitted before the session exists (scenario preparation, the runs it makes) are kept
    and written, in order, once :meth:`attach` is called; later events are tagged with the loop
    that is running.
    """

    def __init__(self, observer: Callable[[_Event], None] | None = None) -> None:
        self._session: Session[FinetuneSessionState] | None = None
        self.ended = False  # a session_end was written in this run (else a crash writes one: end_if_open)
        self._pending: list[_Event] = []
        self._observer = observer  # sees pre-session events at once (the live display)

    def __call__(self, event: _Event) -> None:
        if event.loop is None:  # a trial's worker thread (K trials at once): its loop, whatever is current
            event.loop = trial_loop()
        if self._session is None:
            self._pending.append(event)
            if self._observer is not None:
                self._observer(event)
            return
        current = self._session.state.current
        if event.loop is None and current is not None:
            event.loop = current.index
        self._session.events.emit(event)

    def attach(self, session: Session[FinetuneSessionState]) -> None:
        """Write the kept events, then let the observer follow the session's log itself."""
        self._session = session
        session.events.subscribe(self._note_end)
        pending, self._pending = self._pending, []
        for event in pending:
            session.events.emit(event)  # the observer saw them already
        if self._observer is not None:
            session.events.subscribe(self._observer)

    def _note_end(self, event: _Event) -> None:
        if isinstance(event, SessionEnd):
            self.ended = True

    def end_if_open(self, exc: BaseException) -> None:
        """A crash after the session exists still ends it (``failed``): the UI and ``job status`` would
        show it running for good (issue 34.5). Ctrl-C or SIGTERM (a ``KeyboardInterrupt``) ends it
        ``interrupted``, wherever it lands: the scenario's stages, the forecast's probe, the loop."""
        if self._session is None or self.ended:
            return
        if isinstance(exc, KeyboardInterrupt):
            status, text = "interrupted", str(exc) or "interrupted by the user"
        else:
            status, text = "failed", f"{type(exc).__name__}: {exc}".strip()[:2000]
        try:
            self._session.events.emit(SessionEnd(status=status, message=text))
        except OSError:  # LOG_PATH itself is failing: the error that ends the run says so
            pass
