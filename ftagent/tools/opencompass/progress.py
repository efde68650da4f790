"""Progress of a running OpenCompass evaluation, read from its streamed log.

The evaluator calls ``on_progress(phase, done, total)``:

* ``phase`` — ``"start"`` (process start, imports, model load), ``"merge"`` (LoRA merge before vLLM),
  ``"serve"`` (starting the vLLM server of the ``vllm-server`` backend, until it answers),
  ``"infer:<split>"`` (generation), ``"eval:<split>"`` (scoring), ``"done"``;
* ``done`` / ``total`` — generations of that split (items × ``FT_BENCHMARK_NUM_RUNS``) when
  OpenCompass reports them, else None (show a spinner with the phase).

Inference progress comes from OpenCompass's own lines: ``Start inferencing [<model>/<dataset>]`` and
the inferencer's tqdm bar (``7/13 [...]``, batches of ``batch_size``); scoring progress from the
evaluator's ``Running 0-th replica of evaluation`` line, one per dataset. :class:`LogFollower` tails
the runner's log file in a thread, so it works for every runner that streams to ``log_file``.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from ftagent.core.untrusted import read_tail_from

ProgressCallback = Callable[[str, "int | None", "int | None"], None]
_START = re.compile(r"Start inferencing \[[^/\]]+/(?P<abbr>[^\]]+)\]")
_TQDM = re.compile(r"^\s*\d+%\|[^|]*\|\s*(?P<done>\d+)/(?P<total>\d+)\s*\[")
_SCORE = "Running 0-th replica of evaluation"
_SUMMARY = "write summary to"
log = logging.getLogger(__name__)


def safe_call(on_progress: ProgressCallback | None, phase: str, done: int | None = None,
              total: int | None = None) -> None:
    """Call ``on_progress``; a failing display never fails an evaluation."""
    if on_progress is None:
        return
    try:
        on_progress(phase, done, total)
    except Exception:  # noqa: BLE001
        log.debug("progress callback failed", exc_info=True)


class DatasetInfo(BaseModel):
    """One dataset of the run, in config order."""

    abbr: str  # as in the config (``<abbr>@<split>`` in a multi-split run)
    split: str
    generations: int  # items × runs


class ProgressTracker:
    """Turns OpenCompass log lines into ``on_progress`` calls (reports only changes)."""

    def __init__(self, datasets: list[DatasetInfo], batch_size: int, on_progress: ProgressCallback | None) -> None:
        self.datasets = datasets
        self.batch_size = max(1, batch_size)
        self.on_progress = on_progress
        self.by_abbr = {d.abbr: i for i, d in enumerate(datasets)}
        self.totals: dict[str, int] = {}
        for d in datasets:
            self.totals[d.split] = self.totals.get(d.split, 0) + d.generations
        self.current: int | None = None  # index of the dataset being generated
        self.scored = 0  # datasets whose scoring started
        self.last: tuple[str, int | None, int | None] | None = None

    def _emit(self, phase: str, done: int | None, total: int | None) -> None:
        if (phase, done, total) != self.last:
            self.last = (phase, done, total)
            safe_call(self.on_progress, phase, done, total)

    def _before(self, index: int) -> int:
        """Generations of the datasets of the same split before ``index`` (all finished by then)."""
        split = self.datasets[index].split
        return sum(d.generations for d in self.datasets[:index] if d.split == split)

    def start(self) -> None:
        """The process was started."""
        self._emit("start", None, None)

    def feed(self, line: str) -> None:
        """One log line."""
        if m := _START.search(line):
            index = self.by_abbr.get(m.group("abbr").strip())
            if index is not None:
                self.current = index
                d = self.datasets[index]
                self._emit(f"infer:{d.split}", self._before(index), self.totals[d.split])
        elif self.current is not None and self.scored == 0 and (m := _TQDM.match(line)):
            d = self.datasets[self.current]
            batches, of = int(m.group("done")), int(m.group("total"))
            done = d.generations if batches >= of else min(batches * self.batch_size, d.generations)
            self._emit(f"infer:{d.split}", self._before(self.current) + done, self.totals[d.split])
        elif _SCORE in line and self.scored < len(self.datasets):
            d = self.datasets[self.scored]
            self._emit(f"eval:{d.split}", self._before(self.scored), self.totals[d.split])
            self.scored += 1
        elif _SUMMARY in line:
            self.finish()

    def finish(self) -> None:
        """The summary was written: every split is fully scored (``done`` is the caller's to report)."""
        for split, total in self.totals.items():
            self._emit(f"eval:{split}", total, total)


class LogFollower:
    """Feeds the lines appended to ``path`` (after its size at start) to ``tracker`` from a thread."""

    def __init__(self, path: Path, tracker: ProgressTracker, interval_s: float = 0.5) -> None:
        self.path = Path(path)
        self.tracker = tracker
        self.interval_s = interval_s
        self.offset = self.path.lstat().st_size if self.path.is_file() else 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="oc-progress", daemon=True)
        self._partial = ""

    def __enter__(self) -> LogFollower:
        self.tracker.start()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.poll()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.poll()

    def poll(self) -> None:
        """Read what was appended since the last poll (a callback error never stops the run)."""
        try:  # the evaluation can write the log's folder: no link followed, no FIFO opened, 4 MB per poll
            chunk, _ = read_tail_from(self.path.parent, self.path.name, self.offset)
        except OSError:
            return
        self.offset += len(chunk)
        text = self._partial + chunk.decode("utf-8", errors="replace")
        lines = text.split("\n")
        self._partial = lines.pop()
        for line in lines:
            try:
                self.tracker.feed(line)
            except Exception:  # noqa: BLE001 - progress display must not break an evaluation
                continue
