"""Run untrusted chart code (TableBench visualization answers) in a sandbox of its own.

Each program runs as :mod:`ftagent.benchmarks.program_sandbox` runs one (issue 39, red team B4): a fresh
bubblewrap sandbox that sees its own folder (``table.csv``, the answer, the harness) and the interpreter, no work
folder, no benchmark item, no network, no ``/proc`` of the evaluation, none of the scorer's environment.
Limits: wall-clock timeout (the sandbox is killed), CPU seconds, address space and file size, set by the
harness before the answer runs. Without bubblewrap: ``unshare -n`` (or ``unshare -rn``) when it works here, and
always a ``sitecustomize`` that makes ``socket.socket`` raise. After it ran, the chart's y values are read
from the current axes the way TableBench's ``metrics/chart_metric_utils.py`` getters read them for the item's
``chart_type`` (bar/waterfall heights, hbar widths, pie wedge fractions, line/radar y data, area and
scatter collections), so ``plt.*``, ``ax.*`` and ``df.plot`` charts all count. When matplotlib is not
installed in that python, a recording stand-in for ``matplotlib.pyplot`` records bar/plot/scatter
calls instead (an approximation for machines without matplotlib).
"""

from __future__ import annotations

import csv
import functools
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any

from ftagent.benchmarks import program_sandbox

MARKER = "__FTAGENT_SERIES__"

_SITECUSTOMIZE = '''
import socket as _socket
class _NoNetwork(_socket.socket):
    def __init__(self, *args, **kwargs):
        raise PermissionError("network access is disabled in the answer sandbox")
_socket.socket = _NoNetwork
def _blocked(*args, **kwargs):
    raise PermissionError("network access is disabled in the answer sandbox")
_socket.create_connection = _blocked
_socket.socketpair = _blocked
'''

_HARNESS = r'''
import json, sys, types
SERIES = []
def _values(v):
    if hasattr(v, "tolist"):
        v = v.tolist()
    if isinstance(v, (list, tuple)):
        return [x.item() if hasattr(x, "item") else x for x in v]
    return [v]
def _bar(*a, **k):
    h = k.get("height", a[1] if len(a) > 1 else None)
    if h is not None:
        SERIES.append(_values(h))
def _plot(*a, **k):
    data = [x for x in a if not isinstance(x, str)]
    if len(data) == 1:
        SERIES.append(_values(data[0]))
    for i in range(1, len(data), 2):
        SERIES.append(_values(data[i]))
def _scatter(*a, **k):
    y = k.get("y", a[1] if len(a) > 1 else None)
    if y is not None:
        SERIES.append(_values(y))
CHART = sys.argv[1] if len(sys.argv) > 1 else ""
def _r(x):
    # TableBench's std_digit: round(x, 2) on the value as the getter returns it, so a numpy scalar
    # (a bar's height, a line's y data from a Series) rounds numpy's way (0.015 -> 0.02) and a
    # Python float Python's way (0.015 -> 0.01); the references are Python numbers
    return float(round(x, 2))
def _rounded(values):
    return [_r(x) for x in list(values)]
def _from_axes(ax, chart):
    # TableBench's get_<chart>_y_predictions, one per chart type
    if chart in ("bar", "waterfall"):
        return [_r(p.get_height()) for p in ax.patches]
    if chart == "hbar":
        return [_r(p.get_width()) for p in ax.patches]
    if chart == "pie":
        return [_r(round((p.theta2 - p.theta1) / 360.0, 2)) for p in ax.patches]
    if chart == "line":
        return [_rounded(line.get_ydata()) for line in ax.get_lines()]
    if chart == "radar":
        return [_rounded(line.get_ydata())[:-1] for line in ax.get_lines()]
    if chart == "area":
        return [[_r(y) for y in c.get_paths()[0].vertices[:, 1] if y != 0] for c in ax.collections]
    if chart == "scatter":
        return [[_r(o[1]) for o in c.get_offsets()] for c in ax.collections]
    raise ValueError("unknown chart_type %r" % chart)
REAL = False
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    if not CHART:  # no chart type: record the y arguments of bar/plot/scatter calls
        for _name, _rec in (("bar", _bar), ("plot", _plot), ("scatter", _scatter)):
            def _wrap(*a, _orig=getattr(plt, _name), _rec=_rec, **k):
                _rec(*a, **k)
                return _orig(*a, **k)
            setattr(plt, _name, _wrap)
    plt.show = lambda *a, **k: None
    REAL = True
except ImportError:
    class _Stub(types.ModuleType):
        def __getattr__(self, name):
            return lambda *a, **k: _Stub(name)
        def __iter__(self):
            return iter(())
    plt = _Stub("matplotlib.pyplot")
    plt.bar, plt.plot, plt.scatter = _bar, _plot, _scatter
    mpl = _Stub("matplotlib")
    mpl.pyplot = plt
    sys.modules["matplotlib"], sys.modules["matplotlib.pyplot"] = mpl, plt
code = open("answer.py", encoding="utf-8").read()
exec(compile(code, "answer.py", "exec"), {"__name__": "__main__"})
if REAL and CHART:
    try:
        SERIES = _from_axes(plt.gca(), CHART)
    except Exception as exc:  # the official eval code fails the same way: no Pass@1
        sys.stdout.write("\n__FTAGENT_NO_SERIES__" + repr(exc) + "\n")
        SERIES = None
sys.stdout.write("\n''' + MARKER + r'''" + json.dumps(SERIES, default=str) + "\n")
'''


@dataclass
class SandboxResult:
    """Outcome of one sandboxed run."""

    ok: bool
    series: list[list[Any]] = field(default_factory=list)
    error: str = ""
    timed_out: bool = False
    network_isolation: str = "socket-blocked"


@functools.lru_cache(maxsize=1)
def network_prefix() -> tuple[str, ...]:
    """``("unshare", "-n")`` / ``("unshare", "-rn")`` if it works here, else ``()``."""
    for cmd in (("unshare", "-n"), ("unshare", "-rn")):
        try:
            if subprocess.run([*cmd, "true"], capture_output=True, timeout=10).returncode == 0:
                return cmd
        except (OSError, subprocess.SubprocessError):
            continue
    return ()


def write_table_csv(path: str, table: dict[str, Any]) -> None:
    """``table`` ({columns, data}) as CSV with a header row and no index column."""
    with open(path, "w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(table.get("columns", []))
        writer.writerows(table.get("data", []))


def run_chart_code(code: str, table: dict[str, Any], *, timeout_s: float = 10.0, memory_mb: int = 2048,
                   python: str | None = None, chart_type: str = "") -> SandboxResult:
    """Run ``code`` next to ``table.csv`` and return the recorded y series.

    Args:
        code: The answer's Python code.
        table: ``{"columns": [...], "data": [[...]]}`` written to ``table.csv``.
        timeout_s: Wall-clock limit (process group killed after it).
        memory_mb: Address-space limit.
        python: Interpreter (default: the current one).
        chart_type: TableBench's ``chart_type`` (``bar``, ``line``, ``pie`` …): the y values are then
            read from the axes as TableBench does; empty: the recorded bar/plot/scatter calls.
    """
    python = python or sys.executable
    kind = program_sandbox.confinement().kind
    confined = kind != "none"
    # bubblewrap has its own network namespace and Landlock refuses TCP (its seccomp filter every other socket
    # but AF_UNIX); without either, unshare's when it works here
    prefix = () if confined else network_prefix()
    isolation = f"{kind}+socket-blocked" if confined else ("netns+socket-blocked" if prefix else "socket-blocked")
    with tempfile.TemporaryDirectory(prefix="ftagent-chart-") as tmp:
        write_table_csv(os.path.join(tmp, "table.csv"), table)
        harness = program_sandbox.limits_source(cpu_s=int(timeout_s) + 2, memory_mb=memory_mb) + _HARNESS
        for name, text in (("answer.py", code), ("harness.py", harness)):
            with open(os.path.join(tmp, name), "w", encoding="utf-8") as fh:
                fh.write(text)
        os.mkdir(os.path.join(tmp, "_site"))
        with open(os.path.join(tmp, "_site", "sitecustomize.py"), "w", encoding="utf-8") as fh:
            fh.write(_SITECUSTOMIZE)
        inside = program_sandbox.inside(tmp)
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": os.path.join(inside, "_site"), "HOME": inside,
               "MPLBACKEND": "Agg", "MPLCONFIGDIR": inside, "OMP_NUM_THREADS": "1", "PYTHONNOUSERSITE": "1",
               "LANG": "C.UTF-8"}
        run = program_sandbox.run_program([*prefix, python, "harness.py", chart_type], tmp, python=python,
                                          timeout_s=timeout_s, env=env)
    if run.timed_out:
        return SandboxResult(False, error="timeout", timed_out=True, network_isolation=isolation)
    out, err = run.stdout, run.stderr
    if run.exit_code != 0 or MARKER not in out:
        return SandboxResult(False, error=(err or out)[-2000:], network_isolation=isolation)
    series = json.loads(out.rsplit(MARKER, 1)[1].strip() or "[]")
    return SandboxResult(True, series=series if series is not None else [], network_isolation=isolation,
                         error="" if series is not None else "no chart values on the current axes")
