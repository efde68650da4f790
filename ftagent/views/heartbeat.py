"""A heartbeat for long, otherwise silent work (``ftagent plan``'s baseline and training probe).

Each stage is said when it starts; while it runs, a "still ..." line with its elapsed time comes at least
every ``every`` seconds (issue 32 item 5: ``ftagent plan`` printed nothing for its 66 s probe). Plain
lines, not a live spinner, so logs and pipes see them too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ftagent.core.durations import format_duration

HEARTBEAT_S = 10.0


class Heartbeat:
    """``with Heartbeat(write) as hb: hb.stage("measuring ..."); ...``: writes the stage, then heartbeats."""

    def __init__(self, write: Callable[[str], None], every: float = HEARTBEAT_S) -> None:
        self.write = write
        self.every = every
        self._stage = ""
        self._since = self._start = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)

    def stage(self, text: str) -> None:
        """A new stage starts: say it now; the next heartbeat names it."""
        with self._lock:
            self._stage, self._since = text, time.monotonic()
        self.write(f"{text} ...")

    def _beat(self) -> None:
        while not self._stop.wait(self.every):
            with self._lock:
                stage, since = self._stage, self._since
            if stage:
                now = time.monotonic()
                self.write(f"  still {stage.split(' (')[0]}: {format_duration(now - since)} "
                           f"({format_duration(now - self._start)} in all)")

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
