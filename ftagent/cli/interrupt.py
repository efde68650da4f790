"""Ctrl-C ends ftagent at once, whoever started it (issue 43).

Two things kept a run going after Ctrl-C while the LLM planner waited on an answer (SIGTERM ended it at once):

* a process started in the background by a script (``cmd &`` without job control, ``nohup``, many CI and
  relay harnesses) inherits SIGINT **ignored** (POSIX: an asynchronous list gets SIGINT and SIGQUIT set to
  SIG_IGN), and Python then installs no ``KeyboardInterrupt`` handler: the signal was dropped and the run
  went on. :func:`honour_ctrl_c` installs Python's own handler again, so SIGINT raises
  ``KeyboardInterrupt`` as in a terminal, and the session ends ``interrupted`` (exit 130) as it does there;
* the interpreter's exit itself: after ftagent's last line the final garbage collection walked every object
  LiteLLM and the rest had made (6-7 s at load 13, under 1 s idle). :func:`freeze_at_exit` freezes the heap
  after every other exit handler ran (files are closed and flushed by then, Python runs no finalizer of a
  cycle at exit anyway), so the process ends when its work does.
"""

from __future__ import annotations

import atexit
import gc
import signal
import threading


def honour_ctrl_c() -> None:
    """SIGINT raises ``KeyboardInterrupt`` even when the parent handed it down ignored (main thread only)."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def freeze_at_exit() -> None:
    """Register :func:`gc.freeze` to run after the exit handlers registered later (atexit runs them in
    reverse order): the interpreter's final collection then has nothing to walk."""
    atexit.register(gc.freeze)
