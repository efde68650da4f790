"""Run one subprocess with streamed logging, a tail buffer and a process-tree kill on timeout.

Shared by the local and conda runners. The child starts in its own session (process group), so a
timeout kills everything it spawned, grandchildren included. It runs under the supervisor of
:mod:`ftagent.runners.supervise` (the group's leader), which ends the whole group when ftagent dies,
even by SIGKILL; while it runs, the group is recorded in the child registry (:mod:`ftagent.runners.reaper`)
so a successor can end it if even the supervisor was killed.
"""

from __future__ import annotations

import collections
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from ftagent.core.redact import carries_secret, without_url_credentials
from ftagent.core.untrusted import UnsafeEntry, open_append
from ftagent.runners import reaper
from ftagent.runners.base import RunResult
from ftagent.runners.supervise import supervised_argv

TAIL_LINES = 50

# Environment variables passed from the caller's process to tools unless overridden, each only as
# :func:`tool_value` lets it through. No PIP_*: no tool process installs packages (training, evaluation, the
# data script, the model server); the installers (``ftagent env setup``: toolenv._pip_env, the conda env's
# create, the Docker image build: images.ImageSpec) read the index settings from ftagent's own environment.
# A private index's URL carries its password (issue 39, red team B5).
PASSTHROUGH_VARS = (
    "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "USER", "TERM",
    "HF_HOME", "HF_HUB_CACHE", "HF_DATASETS_CACHE", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE",
    "TRANSFORMERS_OFFLINE", "HF_ENDPOINT", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS",
    "COMPASS_DATA_CACHE", "LITELLM_LOCAL_MODEL_COST_MAP",
    # GPU runs: the driver's libraries where the image puts them, NCCL over the node's NICs
    "LD_LIBRARY_PATH", "CUDA_HOME", "NCCL_SOCKET_IFNAME", "NCCL_IB_DISABLE",
    "NCCL_P2P_DISABLE", "NCCL_DEBUG",
)
# Set in every tool process, whatever the caller's environment says. CUDA numbers GPUs FASTEST_FIRST by
# default, NVML (ftagent.core.hardware, which reads CUDA_VISIBLE_DEVICES as NVML indices and names the
# GPUs a task gets) in PCI bus order: with PCI_BUS_ID both count the same way, so "GPU 1" in a task's
# CUDA_VISIBLE_DEVICES is the GPU NVML reported as index 1 (CUDA Runtime API docs, "CUDA Environment
# Variables": CUDA_DEVICE_ORDER FASTEST_FIRST|PCI_BUS_ID, default FASTEST_FIRST).
FIXED_TOOL_ENV = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
log = logging.getLogger(__name__)
_dropped: set[str] = set()  # variables already warned about (passthrough_env runs for every command)
_SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")


def is_secret_name(name: str) -> bool:
    """True for variable names that look like they carry credentials."""
    upper = name.upper()
    return any(marker in upper for marker in _SECRET_MARKERS)


def tool_value(name: str, value: str) -> str | None:
    """``value`` as a tool process may see it, or None when the variable must not reach one (issue 39, B5).

    A credential never reaches a tool process, whatever the variable is called: the userinfo of every URL is
    removed (``HF_ENDPOINT=https://user:password@mirror`` -> ``https://mirror``: the mirror's address is what
    a tool needs, the password is not), and a value in which the one masker (:mod:`ftagent.core.redact`) still
    finds a secret -- a ``?token=`` parameter, a key shape, a registered secret -- is dropped whole (a masked
    value would be as broken as none), with a warning that names the variable, never the value.
    """
    if is_secret_name(name):
        return None
    clean = without_url_credentials(value)
    if carries_secret(clean):
        if name not in _dropped:
            _dropped.add(name)
            log.warning("%s is not passed to tool processes: its value looks like it carries a credential", name)
        return None
    return clean


def passthrough_env(source: dict[str, str] | None = None) -> dict[str, str]:
    """The safe subset of ``source`` (default ``os.environ``) that tools may see, never secrets (by name or
    by value: :func:`tool_value`), plus :data:`FIXED_TOOL_ENV` (the GPU numbering NVML uses). Every runner
    builds a tool's environment from it (local, conda, Docker, the vLLM server)."""
    source = dict(os.environ) if source is None else source
    kept = {k: tool_value(k, v) for k, v in source.items() if k in PASSTHROUGH_VARS}
    return {**{k: v for k, v in kept.items() if v is not None}, **FIXED_TOOL_ENV}


def kill_tree(pid: int, sig: int = signal.SIGKILL) -> None:
    """Kill ``pid``, its process group and every descendant (best effort, never raises)."""
    import psutil

    try:
        parent = psutil.Process(pid)
        procs = [parent, *parent.children(recursive=True)]
    except psutil.Error:
        procs = []
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError, OSError):
        pass
    for proc in procs:
        try:
            proc.send_signal(sig)
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=5)


def open_log(log_file: Path, root: Path | None) -> IO[str]:
    """Append to a command's log without following a link or opening a special file (issue 39 item 1).

    ``root`` is the command's working folder, which its sandbox can write (a loop workspace): a log inside it
    is reached from ``root`` one folder at a time with ``O_NOFOLLOW`` (:func:`ftagent.core.untrusted.open_append`),
    so a ``logs/train.log`` that an earlier command left as a link to ``~/.bashrc`` is refused, never appended to.

    Raises:
        UnsafeEntry: the log or a folder on its way is a link, a FIFO or another special file.
    """
    path = Path(log_file).absolute()
    base = Path(root).absolute() if root is not None and Path(root).absolute() in path.parents else path.parent
    base.mkdir(parents=True, exist_ok=True)
    return open_append(base, path.relative_to(base))


class LogSink:
    """Writes lines to a log file as they arrive and keeps the last ``TAIL_LINES`` in memory."""

    def __init__(self, log_file: Path | None, tail_lines: int = TAIL_LINES, *, root: Path | None = None) -> None:
        """``root``: the command's working folder (see :func:`open_log`). Raises UnsafeEntry for a planted log."""
        self.log_file = log_file
        self.tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
        self._fh: IO[str] | None = None
        if log_file is not None:
            self._fh = open_log(Path(log_file), root)

    def write(self, line: str) -> None:
        """Record one line (with or without its newline)."""
        line = line.rstrip("\n")
        self.tail.append(line)
        if self._fh is not None:
            self._fh.write(line + "\n")
            self._fh.flush()

    def tail_text(self) -> str:
        """The last lines, joined."""
        return "\n".join(self.tail)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def _pump(stream, sink: LogSink) -> None:
    for line in iter(stream.readline, ""):
        sink.write(line)
    stream.close()


def _missing_executable(head: str, cwd: Path, env: Mapping[str, str]) -> bool:
    """True when the child's ``argv[0]`` cannot be found (what Popen would fail on, said before the supervisor)."""
    if "/" in head:
        path = Path(head) if Path(head).is_absolute() else Path(cwd) / head
        return not (path.is_file() and os.access(path, os.X_OK))
    return shutil.which(head, path=env.get("PATH", os.defpath)) is None


def start_supervised(argv: list[str], **popen_kwargs) -> subprocess.Popen:
    """``Popen`` of ``argv`` under the supervisor, as the leader of a new session (see the module docstring).

    ``popen_kwargs`` go to :class:`subprocess.Popen` (``start_new_session`` is always set). Raises OSError
    like Popen when ``argv[0]`` cannot be found.
    """
    env = popen_kwargs.get("env") or os.environ
    if _missing_executable(argv[0], Path(popen_kwargs.get("cwd") or "."), env):
        raise FileNotFoundError(2, "No such file or directory", argv[0])
    popen_kwargs["start_new_session"] = True
    return subprocess.Popen(supervised_argv(argv), **popen_kwargs)


def run_process(
    argv: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    timeout: float | None = None,
    log_file: Path | None = None,
    stop: threading.Event | None = None,
) -> RunResult:
    """Run ``argv`` with stdout+stderr merged and streamed line by line into ``log_file``.

    Args:
        argv: the full command line.
        cwd: working directory.
        env: the complete environment of the child (nothing is inherited).
        timeout: seconds; on expiry the whole process tree is killed and ``timed_out`` is set.
        log_file: appended to while the command runs (optional).
        stop: when set while the command runs (the trainer's early stop), the process group gets SIGTERM,
            then SIGKILL after a grace period; the exit status is the tool's (e.g. -15).

    Returns:
        RunResult; ``exit_code`` is None when the command could not be started or was killed.
    """
    start = time.monotonic()
    try:
        sink = LogSink(log_file, root=cwd)
    except UnsafeEntry as exc:  # never run with a log ftagent would have to follow a link to write
        return RunResult(exit_code=None, duration_s=0.0, log_tail=f"[ftagent] not run: its log {exc.strerror}")
    try:
        proc = start_supervised(
            argv, cwd=str(cwd), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, text=True, errors="replace", bufsize=1,
        )
    except OSError as exc:
        sink.write(f"[ftagent] cannot start {argv[0]}: {exc}")
        sink.close()
        return RunResult(exit_code=None, duration_s=time.monotonic() - start, log_tail=sink.tail_text(),
                         log_file=str(log_file) if log_file else None)
    record = reaper.record_process(proc.pid, argv)
    pump = threading.Thread(target=_pump, args=(proc.stdout, sink), daemon=True)
    pump.start()
    timed_out = False
    try:
        exit_code: int | None = wait_or_stop(proc, timeout, stop)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_tree(proc.pid)
        proc.wait()
        exit_code = None
    finally:  # also on KeyboardInterrupt / SIGTERM: the tool never outlives the command
        if proc.poll() is None:
            kill_tree(proc.pid)
            proc.wait()
        kill_tree_if_alive(proc.pid)
        reaper.forget(record)
    pump.join(timeout=10)
    duration = time.monotonic() - start
    if timed_out:
        sink.write(f"[ftagent] timed out after {duration:.1f}s (limit {timeout}s); process tree killed")
    elif stop is not None and stop.is_set():
        sink.write(f"[ftagent] stopped on request after {duration:.1f}s (exit {exit_code})")
    sink.close()
    return RunResult(exit_code=exit_code, duration_s=duration, timed_out=timed_out,
                     log_tail=sink.tail_text(), log_file=str(log_file) if log_file else None)


def wait_or_stop(proc: subprocess.Popen, timeout: float | None, stop: threading.Event | None,
                 poll_s: float = 0.5, grace_s: float = 10.0) -> int:
    """``proc.wait(timeout)`` that also ends when ``stop`` is set: SIGTERM to the whole tree first (the
    tool may exit cleanly), SIGKILL for what is left after ``grace_s``.

    Raises:
        subprocess.TimeoutExpired: the timeout passed first (the caller kills the tree).
    """
    if stop is None:
        return proc.wait(timeout=timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    while not stop.is_set():
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise subprocess.TimeoutExpired(proc.args, timeout or 0)
        try:
            return proc.wait(timeout=poll_s if left is None else min(poll_s, left))
        except subprocess.TimeoutExpired:
            continue
    kill_tree(proc.pid, signal.SIGTERM)
    try:
        return proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        return proc.wait()


def kill_tree_if_alive(pgid: int) -> None:
    """Kill leftovers of a finished command's process group (daemons it left behind)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass
