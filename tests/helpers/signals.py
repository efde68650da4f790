"""Ctrl-C inside a test process, whatever SIGINT disposition the test run inherited."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def ctrl_c_raises() -> Iterator[None]:
    """SIGINT raises ``KeyboardInterrupt`` in the main thread for the block, then the old handler is back.

    A test run started in the background without job control (``pytest ... &`` in a script, nohup, some CI
    runners) hands SIGINT down ignored to pytest and its xdist workers; a test that sends itself Ctrl-C then
    sees it dropped and the engine run to its end (seen here: 'completed' instead of 'interrupted')."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
