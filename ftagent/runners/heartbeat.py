"""A heartbeat for long, quiet set-up work (pip installs, image builds).

``pip install`` of LLaMA-Factory + OpenCompass runs for minutes and a Dockerfile ``RUN pip install``
step prints nothing until it ends: without a sign of life a user cannot tell a slow install from a hung
one. :class:`Heartbeat` calls ``say`` at least every ``interval`` seconds while the work runs, with the
elapsed time and the latest thing the tool said (pip's ``Collecting``/``Downloading``/``Building``/
``Installing`` lines, read from its log file, or the newest build-log line handed to :meth:`touch`).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

HEARTBEAT_S = 10.0
#: pip lines worth repeating: what it is fetching, building or installing now
_PIP_LINE = re.compile(r"^\s*(Collecting|Downloading|Building wheel|Building|Installing|Using cached|Processing|"
                       r"Preparing|Successfully|Attempting uninstall|Requirement already)\b")
_TAIL_BYTES = 64 * 1024


def latest_pip_line(log: Path, offset: int = 0) -> str:
    """The newest meaningful pip line written to ``log`` after byte ``offset`` ('' when none)."""
    try:
        with open(log, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(offset, size - _TAIL_BYTES))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    for line in reversed(text.splitlines()):
        if _PIP_LINE.match(line):
            return " ".join(line.split())[:160]
    return ""


class Heartbeat:
    """Say ``what`` with the elapsed time (and the latest detail) every ``interval`` s until stopped.

    Use as a context manager around the quiet work. ``detail`` is polled for the newest detail (e.g.
    :func:`latest_pip_line` of the pip log); :meth:`touch` records a detail pushed by the caller and
    postpones the next beat, so a chatty tool is not interrupted by beats.
    """

    def __init__(self, what: str, say: Callable[[str], None], *, interval: float | None = None,
                 detail: Callable[[], str] | None = None) -> None:
        self.what, self.say, self.detail = what, say, detail
        self.interval = interval if interval is not None else HEARTBEAT_S
        self._last_said = self._start = time.monotonic()
        self._pushed = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat:{what}", daemon=True)
        self.beats = 0

    def touch(self, detail: str = "") -> None:
        """The tool said something itself: remember it and restart the quiet timer."""
        self._pushed = detail or self._pushed
        self._last_said = time.monotonic()

    def note(self, detail: str) -> None:
        """Remember the latest detail the user has not seen (e.g. a build line in quiet mode); no reset."""
        self._pushed = detail or self._pushed

    def _run(self) -> None:
        poll = min(1.0, self.interval / 4)
        while not self._stop.wait(poll):
            now = time.monotonic()
            if now - self._last_said < self.interval - poll:  # so no gap exceeds `interval`
                continue
            detail = (self.detail() if self.detail else "") or self._pushed
            elapsed = f"{now - self._start:.0f}s"
            try:
                self.say(f"{self.what}: {elapsed}" + (f" — {detail}" if detail else ""))
            except Exception:  # noqa: BLE001 - a failing display never fails the install
                pass
            self.beats += 1
            self._last_said = now

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
