"""A session's process hygiene: SIGTERM ends it like Ctrl-C, one process per session, no leftovers.

:func:`begin_run` (called by :func:`ftagent.finetune.app.run_finetune` before any runner starts):

* SIGTERM and SIGHUP raise :class:`Terminated` (a ``KeyboardInterrupt``) in the main thread, so the loop
  ends the way Ctrl-C ends it: the running command's process tree is killed by the runner, the session's
  ``session_end`` event (``interrupted``) is written. Later SIGTERMs are swallowed while that cleanup runs
  (a SIGKILL still ends ftagent; the supervisors then end the tools);
* turns on the child registry under ``FT_FILE_PATH`` and ends what a killed predecessor left there
  (process groups; containers when the runner is Docker), with a ``leftovers_reaped`` event.

:func:`hold` takes a session's lock (a second resume of it exits 2 naming the holder) and tags the
children recorded from then on with its id. The returned cleanup undoes all of it.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

from ftagent.engine.events import LeftoversReaped, _Event
from ftagent.engine.session import S, Session

if TYPE_CHECKING:
    from ftagent.core.settings import Settings
    from ftagent.runners.reaper import Reaped

log = logging.getLogger(__name__)
_held: list[Session[Any]] = []


class Terminated(KeyboardInterrupt):
    """ftagent got SIGTERM/SIGHUP (``ftagent job cancel``, ``kill``, a closed terminal)."""


_received: list[int] = []  # the signal that ended this process's run (SIGTERM/SIGHUP), for its exit code


def interrupt_exit_code() -> int:
    """The exit code of a run ended by a signal, as shells report one: 128 + its number (issue 34.12).

    SIGTERM → 143, SIGHUP → 129, Ctrl-C (no handler of ours: SIGINT) → 130; a wrapper (a job runner, a
    batch script) can tell an interrupted run from a finished one, whose code is 0.
    """
    return 128 + (_received[-1] if _received else int(signal.SIGINT))


def _install_sigterm() -> Callable[[], None]:
    """SIGTERM/SIGHUP → :class:`Terminated` once; returns the function that restores the old handlers."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None  # signal handlers can only be set from the main thread
    fired = threading.Event()
    _received.clear()  # a new run: no signal yet

    def handler(signum: int, _frame: FrameType | None) -> None:
        if fired.is_set():
            return  # the cleanup of the first one is running: let it finish
        fired.set()
        _received.append(signum)
        from ftagent.runners import reaper

        reaper.kill_running_groups()  # the tools stop now; the unwinding below kills what is left
        raise Terminated(f"terminated by {signal.Signals(signum).name}")

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore


def _reaper_client(settings: Settings) -> Any:
    """The client of a runner that declares it reaps its leftovers (``reaper_client``: Docker), else None."""
    from ftagent.runners.base import capabilities
    from ftagent.runners.factory import runner_class

    cls = runner_class(settings.ft.env_type)
    return cls.reaper_client() if capabilities(cls).reaps_leftovers else None


def reap_before_work(settings: Settings, emit: Callable[[_Event], None]) -> Reaped:
    """Turn on the child registry of ``FT_FILE_PATH`` and end what a dead predecessor left in it.

    Returns:
        :class:`ftagent.runners.reaper.Reaped` (also emitted as a ``leftovers_reaped`` event when not empty).
    """
    from ftagent.runners import reaper

    directory = reaper.registry_dir(settings.ft.file_path)
    reaper.activate(directory)
    reaped = reaper.reap_leftovers(directory, docker_client=_reaper_client(settings))
    if not reaped.empty:
        log.warning("%s", reaped.summary())
        emit(LeftoversReaped(processes=reaped.processes, containers=reaped.containers, message=reaped.summary()))
    return reaped


def begin_run(settings: Settings, emit: Callable[[_Event], None]) -> Callable[[], None]:
    """SIGTERM handling, the child registry and the reaper for one run; returns the cleanup (see module)."""
    restore = _install_sigterm()
    try:
        reap_before_work(settings, emit)
    except BaseException:
        restore()
        raise

    def cleanup() -> None:
        from ftagent.runners import reaper

        restore()
        while _held:
            _held.pop().unlock()
        reaper.activate(None)

    return cleanup


def hold(session: Session[S]) -> Session[S]:
    """Lock ``session`` for this process and tag new child records with its id.

    Raises:
        UserInputError: another process works in it (exit 2; the message names pid, host, start time).
    """
    from ftagent.runners import reaper

    session.lock()
    _held.append(session)
    reaper.set_session(session.state.session_id)
    return session
