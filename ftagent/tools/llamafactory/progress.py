"""Training progress while LLaMA-Factory runs: ``output/trainer_log.jsonl`` followed in a thread.

LLaMA-Factory appends one JSON line per logging step (``current_steps``, ``total_steps``, ``loss``,
``lr``, ``remaining_time`` …). :class:`TrainerLogFollower` reads new lines as they appear and hands
each to ``on_point`` — at most one call per ``min_interval_s`` (the last point is always delivered on
:meth:`stop`) — and every point, unthrottled, to ``on_each`` (the early-stop watch must not miss a NaN).
It only reads a file, so it works for every runner that mounts the workspace. The training command can write
that folder while it is followed: the file is opened below ``root`` without following links, only as a
regular file, and at most 4 MB per poll (:func:`ftagent.core.untrusted.read_tail_from`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ftagent.core.untrusted import read_tail_from

log = logging.getLogger(__name__)
TRAINER_LOG = "trainer_log.jsonl"


def eta_seconds(text: Any) -> float | None:
    """``"0:01:05"`` / ``"1 day, 0:00:03"`` (LLaMA-Factory's remaining_time) → seconds."""
    if not isinstance(text, str) or not text:
        return None
    days = 0
    if "day" in text:
        head, _, text = text.partition(",")
        days = int(head.split()[0])
    try:
        parts = [float(p) for p in text.strip().split(":")]
    except ValueError:
        return None
    seconds = 0.0
    for part in parts:
        seconds = seconds * 60 + part
    return days * 86400 + seconds


class TrainerLogFollower:
    """Follow ``<output_dir>/trainer_log.jsonl`` in a daemon thread; use as a context manager."""

    def __init__(self, output_dir: Path, on_point: Callable[[dict[str, Any]], None], *,
                 poll_s: float = 1.0, min_interval_s: float = 2.0,
                 on_each: Callable[[dict[str, Any]], None] | None = None, root: Path | None = None) -> None:
        self.path = Path(output_dir) / TRAINER_LOG
        self.root = Path(root) if root is not None else Path(output_dir)  # the untrusted tree it lies in
        self.on_point, self.on_each = on_point, on_each
        self.poll_s, self.min_interval_s = poll_s, min_interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trainer-log", daemon=True)
        self._offset = self.path.lstat().st_size if self.path.is_file() else 0  # old runs are not progress
        self._last_sent = 0.0
        self._pending: dict[str, Any] | None = None

    def __enter__(self) -> TrainerLogFollower:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._read()
        self._flush(force=True)

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            self._read()
            self._flush()

    def _read(self) -> None:
        try:
            data, size = read_tail_from(self.root, self.path, self._offset)
            if size < self._offset:  # LLaMA-Factory replaced an old run's log
                self._offset = 0
                data, size = read_tail_from(self.root, self.path, 0)
        except OSError:  # missing yet, or a link / FIFO the command planted: never followed, never opened
            return
        complete = data[: data.rfind(b"\n") + 1]
        self._offset += len(complete)
        for line in complete.splitlines():
            try:
                point = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(point, dict) and "current_steps" in point:
                self._pending = point
                self._watch(point)

    def _watch(self, point: dict[str, Any]) -> None:
        if self.on_each is None:
            return
        try:
            self.on_each(point)
        except Exception:  # noqa: BLE001 - a broken watcher never fails training
            log.warning("trainer log watcher failed", exc_info=True)

    def _flush(self, force: bool = False) -> None:
        now = time.monotonic()
        if self._pending is None or (not force and now - self._last_sent < self.min_interval_s):
            return
        point, self._pending, self._last_sent = self._pending, None, now
        try:
            self.on_point(point)
        except Exception:  # noqa: BLE001 - a display problem never fails training
            log.debug("progress callback failed", exc_info=True)


def progress_detail(point: dict[str, Any]) -> dict[str, Any]:
    """The fields of a trainer_log point that a progress display shows."""
    out: dict[str, Any] = {}
    for key in ("loss", "lr", "epoch", "reward", "accuracy"):  # GRPO's mean reward, DPO's preference accuracy
        if isinstance(point.get(key), int | float):
            out[key] = point[key]
    eta = eta_seconds(point.get("remaining_time"))
    if eta is not None:
        out["eta_s"] = eta
    return out
