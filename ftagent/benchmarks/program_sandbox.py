"""One program a model wrote, run in a sandbox of its own (issue 39, red team B4).

The code scorer (``humaneval``, ``mbpp``: :mod:`ftagent.benchmarks.code_tests`) and TableBench's chart runner
(:mod:`ftagent.benchmarks.domain.sandbox`) run what the model answered, inside the evaluation's own sandbox, next
to what that sandbox must see: the evaluation's work folder (predictions, results, the item scores ftagent reads
back), the benchmark's items (every split) and, with a judge, the judge gateway's token in the environment. The
model's program sees none of it: each run is a fresh bubblewrap sandbox with

* its own user, PID, network, IPC, UTS and cgroup namespaces (``--unshare-all``), no capabilities
  (``--cap-drop ALL``), a new session (no terminal), and it dies with the scorer (``--die-with-parent``);
* as files only the system folders (``/usr``, ``/bin``, ``/lib*``; read-only), the interpreter's own prefixes
  (read-only: the tool env and the Python it was made from) and the run's own fresh folder, read-write, at
  ``/tmp`` (:data:`INSIDE`); no ``/etc``, no home, no work folder, no items;
* a ``/proc`` of its own PID namespace only, or none: inside another bubblewrap sandbox (the evaluation's) the
  kernel refuses a new ``/proc`` (its parent's ``/proc`` has covered parts), and the program gets no ``/proc``
  at all rather than its parent's (:func:`confinement` probes which);
* the environment the caller gives, nothing inherited (the scorer's ``OPENAI_API_KEY`` never reaches it, not even
  in bubblewrap's own ``/proc/1/environ``: bubblewrap is started with that environment);
* the wall-clock limit the caller gives (the process group is killed), and the limits its harness sets before
  the program's code runs (:func:`limits_source`: 64 MiB per file, the chart runner's CPU seconds and address
  space); stdout and stderr go to unnamed files outside its folder, so a program that prints without end stops
  at the file-size limit.

Cost (measured on a 2-core machine under a load of 9, 30 trivial programs with the tool env's Python): a median
of 73-90 ms per program in bubblewrap against 73-78 ms without; the interpreter's start is most of it.

Where bubblewrap is missing or cannot create namespaces (a Docker container under Docker's default seccomp
profile: the docker runner), each program confines itself with Landlock and a seccomp filter
(:mod:`ftagent.benchmarks.program_landlock`, ``confinement().kind == "landlock"``). With neither, the program runs
as a plain subprocess in its own folder with the same environment and limits (``"none"``, its reason says why):
its own environment holds no secret, but the files of the evaluation's sandbox (or container) and its processes'
``/proc`` entries are within its reach, as they were before issue 39; the evaluation's log says so once (a
WARNING line naming the reason). Standard library only:
imported by scorers inside the tool env.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from ftagent.benchmarks import program_landlock

INSIDE = "/tmp"  # where the run's own folder is, seen from inside the sandbox
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
MAX_FILE_BYTES = 64 << 20  # RLIMIT_FSIZE: what the program may write to one file (its stdout included)
_PROBE_TIMEOUT_S = 20
_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded here: the child before exec may not import


@dataclass(frozen=True)
class Confinement:
    """How programs run here: ``kind`` ``"bwrap"`` (``proc``: with a ``/proc`` of their own), ``"landlock"``
    (:mod:`ftagent.benchmarks.program_landlock`: where bubblewrap cannot make namespaces) or ``"none"``."""

    kind: str
    reason: str = ""
    proc: bool = False


@dataclass(frozen=True)
class ProgramRun:
    """One run: exit status (None when killed for its time), its output, whether it timed out, how it was confined."""

    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool
    confinement: str


def _bwrap_flags(proc: bool) -> list[str]:
    flags = ["--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    for path in SYSTEM_DIRS:
        flags += ["--ro-bind-try", path, path]
    flags += ["--dev", "/dev"]
    return flags + (["--proc", "/proc"] if proc else [])


@functools.lru_cache(maxsize=1)
def confinement() -> Confinement:
    """Probe (once per process) whether bubblewrap runs here, and whether with a ``/proc`` of its own; else
    whether Landlock does (a Docker container: the engine's seccomp profile refuses user namespaces)."""
    found = _bwrap_confinement()
    if found.kind == "bwrap":
        return found
    version = program_landlock.abi()
    if version >= program_landlock.MIN_ABI:
        return Confinement("landlock", f"{found.reason}; Landlock ABI {version} instead")
    return Confinement("none", f"{found.reason}; Landlock ABI {version} (< {program_landlock.MIN_ABI}: no "
                       "network rules)")


def _bwrap_confinement() -> Confinement:
    exe = shutil.which("bwrap")
    if exe is None:
        return Confinement("none", "bwrap is not installed (apt-get install bubblewrap)")
    error = ""
    for proc in (True, False):
        argv = [exe, *_bwrap_flags(proc), "--", "/bin/sh", "-c", ":"]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S,
                                  env={"PATH": "/usr/bin:/bin"}, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError) as exc:
            return Confinement("none", f"bwrap cannot run here: {exc}")
        if done.returncode == 0:
            return Confinement("bwrap", proc=proc)
        error = error or done.stderr.strip()[:200]
    return Confinement("none", f"bwrap cannot create namespaces here: {error}")


def python_roots(python: str) -> list[str]:
    """The folders an interpreter needs besides the system ones: its venv (``pyvenv.cfg``), the Python that venv
    was made from (``home``) and the installation its executable really is (links resolved)."""
    exe = os.path.abspath(python)
    roots: list[str] = []
    venv = os.path.dirname(os.path.dirname(exe))
    cfg = os.path.join(venv, "pyvenv.cfg")
    if os.path.isfile(cfg):
        roots.append(venv)
        with open(cfg, encoding="utf-8") as fh:
            for line in fh:
                key, _, value = line.partition("=")
                if key.strip() == "home" and value.strip():
                    home = value.strip()
                    roots.append(os.path.dirname(home) if os.path.basename(home) == "bin" else home)
    roots.append(os.path.dirname(os.path.dirname(os.path.realpath(exe))))
    kept: list[str] = []
    for root in dict.fromkeys(os.path.realpath(r) for r in roots):
        if not any(root == d or root.startswith(d + "/") for d in SYSTEM_DIRS) and root != "/":
            kept.append(root)
    return kept


def inside(folder: str) -> str:
    """The run folder's path as the program sees it."""
    return INSIDE if confinement().kind == "bwrap" else folder


def command_line(cmd: list[str], folder: str, python: str) -> list[str]:
    """``cmd`` wrapped in its sandbox (module docstring); unchanged without bubblewrap."""
    conf = confinement()
    if conf.kind != "bwrap":
        return list(cmd)
    argv = [shutil.which("bwrap") or "bwrap", *_bwrap_flags(conf.proc)]
    for root in python_roots(python):
        argv += ["--ro-bind", root, root]
    real = os.path.realpath(python)
    if os.path.abspath(python) != real:  # a venv's python is a link: it must resolve inside too
        argv += ["--ro-bind", real, real]
    return [*argv, "--bind", folder, INSIDE, "--chdir", INSIDE, "--", *cmd]


def _tail(fh, limit: int) -> str:
    fh.seek(0, os.SEEK_END)
    size = fh.tell()
    fh.seek(max(0, size - limit))
    return fh.read().decode("utf-8", errors="replace")


def limits_source(*, cpu_s: int | None = None, memory_mb: int | None = None) -> str:
    """Python source a harness runs first, before the program's code: the file-size limit (and CPU seconds,
    address space), soft and hard, so the program cannot raise them. Set there, not in a ``preexec_fn``: that
    makes ``subprocess`` fork instead of vfork, 50-60 ms per program in a scorer process as large as
    OpenCompass's eval task."""
    lines = ["import resource as _r", f"_r.setrlimit(_r.RLIMIT_FSIZE, ({MAX_FILE_BYTES}, {MAX_FILE_BYTES}))"]
    if cpu_s is not None:
        lines.append(f"_r.setrlimit(_r.RLIMIT_CPU, ({int(cpu_s)}, {int(cpu_s)}))")
    if memory_mb is not None:
        lines.append(f"_r.setrlimit(_r.RLIMIT_AS, ({int(memory_mb) << 20}, {int(memory_mb) << 20}))")
    return "\n".join(lines + ["del _r", ""])


@functools.lru_cache(maxsize=1)
def _warn_once(reason: str) -> None:
    """Say once per scorer process, in the evaluation's log, that programs run without a sandbox of their own."""
    print(f"[ftagent] WARNING: the model's programs run without a sandbox of their own ({reason}): they can "
          "reach the evaluation's files and processes", file=sys.stderr, flush=True)


def _die_with_parent() -> None:  # without bubblewrap only: in the child, before exec
    """SIGKILL the program when the scorer dies: it is the leader of its own session, so a group kill of the
    evaluator would miss it (bubblewrap's ``--die-with-parent`` does this in the sandbox)."""
    _LIBC.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _child_setup(kind: str, folder: str, python: str):
    """(``preexec_fn``, descriptors to pass) for a program run: nothing under bubblewrap (it confines and dies
    with its parent itself); else the parent-death signal, and with Landlock its ruleset (built here, applied in
    the child: :func:`ftagent.benchmarks.program_landlock.restrict`)."""
    if kind == "bwrap":
        return None, ()
    if kind != "landlock":
        return _die_with_parent, ()
    readable = [*SYSTEM_DIRS, *python_roots(python), os.path.realpath(python)]
    fd = program_landlock.ruleset(folder, readable)

    def setup() -> None:
        _die_with_parent()
        program_landlock.restrict(fd)

    return setup, (fd,)


def _kill_group(proc: subprocess.Popen, killed: list[bool]) -> None:
    if proc.returncode is not None:  # the timer fired just as the program ended by itself
        return
    killed.append(True)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _feed(proc: subprocess.Popen, text: str) -> None:
    """``text`` on the program's standard input, which is then closed (a program that closed it first: fine)."""
    assert proc.stdin is not None
    try:
        proc.stdin.write(text.encode("utf-8"))
        proc.stdin.close()
    except (BrokenPipeError, OSError):
        pass


def run_program(cmd: list[str], folder: str, *, python: str | None = None, timeout_s: float,
                env: Mapping[str, str], stdin: str = "", output_limit: int = MAX_FILE_BYTES) -> ProgramRun:
    """Run ``cmd`` (its interpreter is ``python``, default this one) confined to ``folder``.

    Args:
        cmd: the command as the program sees it (paths relative to its folder, or under :func:`inside`).
        folder: the run's own fresh folder (the caller's temporary folder); nothing else is writable.
        python: the interpreter ``cmd`` runs (its prefixes are made visible read-only).
        timeout_s: wall clock; the process group is killed after it.
        env: the program's whole environment.
        stdin: given on its standard input, which is then closed.
        output_limit: at most this many bytes of stdout and of stderr are read back (the end).
    """
    python = python or sys.executable
    argv = command_line(cmd, folder, python)
    kind = confinement().kind
    if kind == "none":
        _warn_once(confinement().reason)
    try:
        preexec = _child_setup(kind, folder, python)
    except OSError as exc:  # the ruleset could not be built: the program does not run
        return ProgramRun(None, "", f"cannot confine the program: {exc}", False, kind)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(argv, cwd=folder, env=dict(env), stdin=subprocess.PIPE, stdout=out, stderr=err,
                                    start_new_session=True, preexec_fn=preexec[0], pass_fds=preexec[1])
        except OSError as exc:
            return ProgramRun(None, "", f"cannot start {argv[0]}: {exc}", False, kind)
        finally:
            for fd in preexec[1]:
                os.close(fd)
        # a blocking wait and a timer that kills, not Popen.wait(timeout): that one polls with sleeps of up to
        # 50 ms, which was most of a short program's cost
        killed: list[bool] = []
        timer = threading.Timer(timeout_s, _kill_group, (proc, killed))
        timer.start()
        try:
            _feed(proc, stdin)
            proc.wait()
        finally:
            timer.cancel()
            if proc.poll() is None:  # interrupted: the program never outlives its scorer
                _kill_group(proc, killed)
                proc.wait()
        timed_out = bool(killed)
        return ProgramRun(None if timed_out else proc.returncode, _tail(out, output_limit),
                          _tail(err, output_limit), timed_out, kind)
