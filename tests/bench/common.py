"""Shared helpers of the benchmarks: timing, peak RSS of a process tree, ratios, table + JSON output.

Every benchmark appends :class:`Measurement` rows (and :class:`Ratio` rows computed from two
measurements taken side by side in the same run) to a :class:`BenchResults`; ``run_all`` prints
them as a table and writes ``bench-results.json``.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
from pydantic import BaseModel, Field

MIB = 1024 * 1024


class Measurement(BaseModel):
    """One measured number."""

    section: str
    name: str
    value: float | None
    unit: str = ""
    detail: str = ""


class Ratio(BaseModel):
    """``numerator / denominator`` of two measurements, with an optional upper target."""

    section: str
    name: str
    numerator: float | None
    denominator: float | None
    value: float | None
    target_max: float | None = None
    target_min: float | None = None
    ok: bool | None = None

    def target_text(self) -> str:
        """``<= 1.05``, ``>= 0.7`` or ``0.7 - 1.3``; empty without a target."""
        if self.target_min is not None and self.target_max is not None:
            return f"{self.target_min:g} - {self.target_max:g}"
        if self.target_max is not None:
            return f"<= {self.target_max:g}"
        return "" if self.target_min is None else f">= {self.target_min:g}"


class BenchResults(BaseModel):
    """Everything one ``run_all`` invocation measured (the content of ``bench-results.json``)."""

    started: str = Field(default_factory=lambda: _dt.datetime.now().isoformat(timespec="seconds"))
    machine: dict[str, Any] = Field(default_factory=dict)
    options: dict[str, Any] = Field(default_factory=dict)
    measurements: list[Measurement] = Field(default_factory=list)
    ratios: list[Ratio] = Field(default_factory=list)
    skipped: dict[str, str] = Field(default_factory=dict)
    errors: dict[str, str] = Field(default_factory=dict)

    def add(self, section: str, name: str, value: float | None, unit: str = "", detail: str = "",
            echo: bool = True) -> Measurement:
        """Record (and print) one measurement."""
        m = Measurement(section=section, name=name, value=value, unit=unit, detail=detail)
        self.measurements.append(m)
        if echo:
            print(format_measurement(m), flush=True)
        return m

    def add_ratio(self, section: str, name: str, numerator: float | None, denominator: float | None,
                  target_max: float | None = None, echo: bool = True, target_min: float | None = None) -> Ratio:
        """Record (and print) ``numerator / denominator``; ``ok`` compares it with the target bounds."""
        value = ratio(numerator, denominator)
        ok = None
        if value is not None and (target_max is not None or target_min is not None):
            ok = (target_max is None or value <= target_max) and (target_min is None or value >= target_min)
        r = Ratio(section=section, name=name, numerator=numerator, denominator=denominator, value=value,
                  target_max=target_max, target_min=target_min, ok=ok)
        self.ratios.append(r)
        if echo:
            print(format_ratio(r), flush=True)
        return r

    def write_json(self, path: Path) -> Path:
        """Write the results as indented JSON."""
        path = Path(path)
        path.write_text(self.model_dump_json(indent=2), encoding="utf-8")
        return path


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator``; None when either is missing or the denominator is not positive."""
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def _num(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "n/a"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def format_measurement(m: Measurement) -> str:
    """One printed line: ``[section] name ........ value unit  (detail)``."""
    text = f"[{m.section}] {m.name:<44} {_num(m.value):>10} {m.unit}".rstrip()
    return f"{text}  ({m.detail})" if m.detail else text


def format_ratio(r: Ratio) -> str:
    """One printed line for a ratio, with the verdict when there is a target."""
    verdict = ""
    if r.target_text():
        verdict = f"  target {r.target_text()}: " + ("n/a" if r.ok is None else "OK" if r.ok else "MISSED")
    return (f"[{r.section}] RATIO {r.name:<38} {_num(r.value, 3):>10}  "
            f"({_num(r.numerator)} / {_num(r.denominator)}){verdict}")


def summary_table(results: BenchResults) -> str:
    """A Markdown table of every measurement and ratio (what ``run_all`` prints at the end)."""
    lines = ["| section | measurement | value | unit / target |", "|---|---|---|---|"]
    for m in results.measurements:
        lines.append(f"| {m.section} | {m.name} | {_num(m.value)} | {m.unit} |")
    for r in results.ratios:
        verdict = "n/a" if r.ok is None else "OK" if r.ok else "MISSED"
        target = f"target {r.target_text()} ({verdict})" if r.target_text() else ""
        lines.append(f"| {r.section} | ratio {r.name} | {_num(r.value, 3)} | {target} |")
    for section, reason in results.skipped.items():
        lines.append(f"| {section} | skipped | – | {reason} |")
    for section, error in results.errors.items():
        lines.append(f"| {section} | ERROR | – | {error[:120]} |")
    return "\n".join(lines)


def machine_info() -> dict[str, Any]:
    """CPU count, memory, load average and date: the context every number needs."""
    load = os.getloadavg()
    return {
        "date": _dt.date.today().isoformat(),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 1024**3, 1),
        "loadavg_1_5_15": [round(x, 2) for x in load],
        "python": platform.python_version(),
    }


def load_average() -> str:
    """The 1/5/15-minute load average as a short string."""
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


# --- peak RSS of a process tree -------------------------------------------------------------------


def tree_rss(root_pid: int, include_root: bool = True) -> int:
    """Sum of the RSS (bytes) of ``root_pid`` and all its descendants; 0 when it is gone."""
    try:
        root = psutil.Process(root_pid)
        procs = root.children(recursive=True)
        if include_root:
            procs.append(root)
    except psutil.Error:
        return 0
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            continue
    return total


class RssSampler:
    """Polls the RSS of a process tree in a thread and keeps the peak.

    Use ``RssSampler(os.getpid(), include_root=False)`` to watch the subprocesses a library call
    starts (e.g. a runner's ``llamafactory-cli``), or the pid of a child you started yourself.
    """

    def __init__(self, root_pid: int, *, include_root: bool = True, interval: float = 0.2) -> None:
        self.root_pid = root_pid
        self.include_root = include_root
        self.interval = interval
        self.peak_bytes = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def sample(self) -> int:
        """Take one sample now; return it."""
        value = tree_rss(self.root_pid, include_root=self.include_root)
        self.samples += 1
        self.peak_bytes = max(self.peak_bytes, value)
        return value

    def start(self) -> RssSampler:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> int:
        """Stop polling; return the peak in bytes."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        return self.peak_bytes

    @property
    def peak_mib(self) -> float:
        return self.peak_bytes / MIB

    def __enter__(self) -> RssSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Timed(BaseModel):
    """Wall time and peak tree RSS of one block or command."""

    wall_s: float = 0.0
    peak_rss_mib: float = 0.0
    exit_code: int | None = None


@contextmanager
def timed_children(interval: float = 0.2) -> Iterator[Timed]:
    """Time a block and record the peak RSS of the subprocesses this process starts inside it."""
    out = Timed()
    sampler = RssSampler(os.getpid(), include_root=False, interval=interval).start()
    start = time.monotonic()
    try:
        yield out
    finally:
        out.wall_s = time.monotonic() - start
        out.peak_rss_mib = sampler.stop() / MIB


def run_command(argv: list[str], *, cwd: Path, env: dict[str, str], log_file: Path,
                timeout: float | None = None, interval: float = 0.2) -> Timed:
    """Run ``argv`` (output to ``log_file``), returning wall time, exit code and peak tree RSS."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with open(log_file, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(argv, cwd=str(cwd), env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        with RssSampler(proc.pid, interval=interval) as sampler:
            try:
                code = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                code = None
    return Timed(wall_s=time.monotonic() - start, peak_rss_mib=sampler.peak_mib, exit_code=code)


def tools_env_from_environ() -> Path | None:
    """``FT_TOOLS_ENV`` when it points to a tool env with ``bin/python``, else None."""
    value = os.environ.get("FT_TOOLS_ENV")
    if value and (Path(value) / "bin" / "python").exists():
        return Path(value)
    return None


def offline_env() -> dict[str, str]:
    """The environment variables every benchmarked tool run gets (offline, one OpenMP thread)."""
    return {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
