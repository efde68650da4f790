"""The session's one writer of ``events.jsonl``: append-only, one fsynced JSON line per event, live subscribers.

An event is written under the log's lock and then handed to the subscribers in the thread that emitted it,
outside the lock (K trials emit at once; a subscriber may emit). So a line can be in the file before a subscriber
has seen it: a decision that reads a subscriber's view (the scheduler's ``loop_guard``, from the re-forecaster)
first calls :meth:`EventLog.wait_delivered`, and then sees every event written before it.

What an event is, and reading them back: :mod:`ftagent.engine.events`.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from ftagent.core.redact import mask_text
from ftagent.engine.events import _Event


class EventLog:
    """Append-only writer; each line is flushed and fsynced so a SIGKILL loses at most one line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._delivered = threading.Condition(self._lock)  # notified whenever an event has reached every subscriber
        self._written = 0  # events written by this log object (their sequence numbers)
        self._undelivered: dict[int, int] = {}  # sequence number -> the thread handing it to the subscribers
        self._subscribers: list[Callable[[_Event], None]] = []
        self._count: int | None = None  # lines in the file, once counted: every commit asks (K trials at once)

    def subscribe(self, callback: Callable[[_Event], None]) -> None:
        """Call ``callback`` with every event after it is written (e.g. the live console display)."""
        self._subscribers.append(callback)

    def emit(self, event: _Event) -> None:
        """Append one event, then hand it to the subscribers (whose errors never reach the step)."""
        line = mask_text(event.model_dump_json()) + "\n"  # secrets never reach the disk (core.redact)
        with self._lock, open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
            if self._count is not None:
                self._count += 1
            self._written += 1
            seq = self._written
            self._undelivered[seq] = threading.get_ident()
        try:
            for callback in self._subscribers:
                try:
                    callback(event)
                except Exception:  # noqa: BLE001 - a display problem must not fail the loop
                    logging.getLogger(__name__).debug("event subscriber failed", exc_info=True)
        finally:
            with self._lock:
                del self._undelivered[seq]
                self._delivered.notify_all()

    def wait_delivered(self) -> None:
        """Return once every event written before this call has been handed to every subscriber, whichever thread
        wrote it (events written meanwhile are not waited for: K busy trials cannot starve it). Events the calling
        thread is itself delivering (it was called from a subscriber) are not waited for: that would never end."""
        me = threading.get_ident()
        with self._lock:
            upto = self._written
            while any(seq <= upto and who != me for seq, who in self._undelivered.items()):
                self._delivered.wait(timeout=0.5)  # the timeout only keeps Ctrl-C prompt in the main thread

    def count(self) -> int:
        """Number of complete lines written so far (read once, then kept by :meth:`emit`: this log is the
        session's only writer while it holds the session's lock)."""
        with self._lock:
            if self._count is None:
                if not self.path.exists():
                    return 0
                with open(self.path, "rb") as fh:
                    self._count = sum(1 for line in fh if line.endswith(b"\n"))
            return self._count

    def truncate(self, n_lines: int) -> None:
        """Keep only the first ``n_lines`` complete lines (used by resume with checkout)."""
        if not self.path.exists():
            return
        with open(self.path, "rb") as fh:
            lines = [line for line in fh if line.endswith(b"\n")][:n_lines]
        tmp = self.path.with_suffix(".tmp")
        tmp.write_bytes(b"".join(lines))
        os.replace(tmp, self.path)
        with self._lock:
            self._count = len(lines)
