"""How much slower a CPU thread runs now than on an idle machine: the re-forecast's "load now" (issue 43).

A sampler thread times a fixed piece of work every few seconds — SHA-256 over 16 MiB, which ``hashlib``
computes with the GIL released, so ftagent's own Python threads do not count as load — and
records the share of the wall time the thread got the CPU for (``time.thread_time`` over
``time.perf_counter``). Its inverse is the **slowness**: 1.0 on an idle CPU, 4.0 when three other
CPU-bound processes share this thread's CPU. The work is ~25 ms of CPU, longer than the scheduler's credit
for a thread that slept (a 2.5 ms sample read 1.0 with three CPU hogs beside it; 16 MiB read 9.5-14, against
2-3.4 without them, pinned to one CPU of this loaded 2-core machine). A single-threaded CPU-bound step (a CPU
training or evaluation process) takes about that factor times its unshared time, so step times measured
under one slowness are rescaled to another.

Why not the load average: it trails a change by about a minute (its 1-minute exponential), and it counts
every CPU of the machine, not the CPUs this process may use (``sched_getaffinity``), so a pinned session and
a busy neighbour read the same. The sampler costs ~25 ms of CPU every 5 s (0.5 %).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import deque
from collections.abc import Callable

_BUFFER = bytes(1 << 20)  # 1 MiB: hashlib releases the GIL for inputs over 2 KiB
HALF = 0.5
MAX_SLOWNESS = 50.0  # a sample the thread barely ran in (a stopped process): not a measurement beyond this


def sample_slowness(rounds: int = 16) -> float:
    """One measurement: wall time ÷ CPU time of this thread hashing ``rounds`` MiB (1.0 = the CPU was ours)."""
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    for _ in range(rounds):
        hashlib.sha256(_BUFFER).digest()
    wall, cpu = time.perf_counter() - wall0, time.thread_time() - cpu0
    if cpu <= 0:
        return 1.0  # a clock too coarse to tell: no evidence of load
    return min(MAX_SLOWNESS, max(1.0, wall / cpu))


class CpuSpeedMonitor:
    """Samples :func:`sample_slowness` every ``interval_s`` in a daemon thread; answers averages over time."""

    def __init__(self, interval_s: float = 5.0, keep_s: float = 6 * 3600.0,
                 clock: Callable[[], float] = time.time, sampler: Callable[[], float] = sample_slowness) -> None:
        self.interval_s, self.keep_s = interval_s, keep_s
        self.clock, self.sampler = clock, sampler
        self._samples: deque[tuple[float, float]] = deque()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> CpuSpeedMonitor:
        """Take one sample now and keep sampling until :meth:`stop`."""
        self.sample()
        self._thread = threading.Thread(target=self._run, name="cpu-speed", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def sample(self) -> float:
        """Measure now and record it; returns the slowness."""
        value = self.sampler()
        now = self.clock()
        with self._lock:
            self._samples.append((now, value))
            while self._samples and self._samples[0][0] < now - self.keep_s:
                self._samples.popleft()
        return value

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def slowness(self, since: float, until: float | None = None) -> float | None:
        """The mean slowness sampled in ``[since, until]`` (None: no sample in it)."""
        end = self.clock() if until is None else until
        with self._lock:
            values = [v for t, v in self._samples if since <= t <= end]
        return sum(values) / len(values) if values else None

    def now(self, window_s: float | None = None) -> float:
        """The slowness now: the samples of the last ``window_s`` seconds (default: 8 samples' worth, 40 s), the
        newest weighing most (halved every 2 samples back: a rise shows within ~2 samples, one stray sample
        does not swing it); a sample taken now when there is none."""
        since = self.clock() - (8 * self.interval_s if window_s is None else window_s)
        with self._lock:
            values = [v for t, v in self._samples if t >= since]
        if not values:
            return self.sample()
        weights = [float(HALF ** ((len(values) - 1 - i) / 2)) for i in range(len(values))]
        return float(sum(w * v for w, v in zip(weights, values, strict=True)) / sum(weights))
