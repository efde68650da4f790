"""Runs the MCP server starts: ``ftagent llm_finetune`` itself, in the background, one process per run.

A run is the CLI command in a child process (the one code path: its start-up, its session, its SIGTERM handling),
so it outlives the MCP request that started it. Its lifetime (docs/agents.md, "Runs and the server"):

* by default a run dies with the server: the server SIGTERMs its runs when it shuts down (they end as after
  Ctrl-C: ``session_end`` interrupted, resumable), and each child is started with ``PR_SET_PDEATHSIG`` = SIGTERM so
  that a server killed outright still ends them the same way;
* a detached run (``ftagent mcp --detach``, or ``detach: true`` on start/resume) is left alone: it goes on after
  the server and the MCP client are gone, and ``cancel`` (from any server) or ``kill -TERM`` ends it.

Every child runs in its own process group (the MCP client's stdio transport kills the server's group on close,
which must not reach a detached run) with the server's environment and working directory; its console goes to
``LOG_PATH/.mcp/<time>-<pid>.log``. Which session a child works in is read from the session's lock holder
(``.lock.holder.json`` names the pid), so nothing new is told to the child.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel

from ftagent.core.errors import UserInputError
from ftagent.engine.session import SessionLock
from ftagent.views.layout import is_session_dir

# the command a run is: this interpreter's ftagent (tests put a wrapper here that shortens the training probe)
CHILD_COMMAND: list[str] = [sys.executable, "-m", "ftagent"]
RUNS_DIR = ".mcp"  # under LOG_PATH: console logs and one record per started session (hidden from session lists)
POLL_S = 0.2
STOP_GRACE_S = 1.5  # the MCP client's stdio transport SIGTERMs the server 2 s after closing its stdin


class StartResult(BaseModel):
    """A run started (or resumed) in the background."""

    session_id: str | None  # None while it is still preparing (datasets, base model) after wait_s
    session_dir: str | None
    pid: int
    state: str  # running | preparing
    detached: bool
    console_log: str  # the run's console output (its error line, when it ends early)
    command: list[str]


class RunRecord(BaseModel):
    """What the server wrote down about a session it started (``LOG_PATH/.mcp/<session>.json``): resume reuses
    the run file, so a resumed session runs with the settings it started with."""

    session_id: str
    config: str | None = None
    console_log: str
    started_at: float


@dataclass
class Child:
    proc: subprocess.Popen[bytes]
    console: Path
    detached: bool
    command: list[str]
    started_at: float = field(default_factory=time.time)


def _term_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: SIGTERM this run when the server dies (it then ends as after Ctrl-C)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def last_error_line(console: Path) -> str | None:
    """The ``error: ...`` line the CLI printed (its one-line message), or None."""
    try:
        lines = console.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    return next((ln.removeprefix("error: ") for ln in reversed(lines) if ln.startswith("error: ")), None)


class RunManager:
    """The runs this server started; ``detach``: the default for a start that does not say."""

    def __init__(self, detach: bool = False) -> None:
        self.detach = detach
        self.children: list[Child] = []

    def spawn(self, args: list[str], log_path: Path, detach: bool | None) -> Child:
        """Start ``ftagent <args>`` (call on the event loop's thread: PR_SET_PDEATHSIG follows the forking thread)."""
        self.reap()
        detached = self.detach if detach is None else detach
        folder = Path(log_path) / RUNS_DIR
        folder.mkdir(parents=True, exist_ok=True)
        console = folder / f"{time.strftime('%Y-%m-%d_%H-%M-%S')}-{len(self.children)}-{os.getpid()}.log"
        command = [*CHILD_COMMAND, *args]
        with open(console, "wb") as out:
            proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, cwd=os.getcwd(), env=dict(os.environ),
                                    preexec_fn=None if detached else _term_with_parent)
        child = Child(proc=proc, console=console, detached=detached, command=command)
        self.children.append(child)
        return child

    async def wait_for_session(self, child: Child, log_path: Path, wait_s: float,
                               session_dir: Path | None = None) -> Path | None:
        """The session the child holds (``session_dir``: a resume's), once it holds it; None after ``wait_s``.

        Raises:
            UserInputError: the child ended first (its one-line error, as the CLI printed it; exit 2 or 1).
        """
        deadline = time.monotonic() + wait_s
        while True:
            found = self._held_by(child, Path(log_path), session_dir)
            if found is not None:
                return found
            if child.proc.poll() is not None:
                line = last_error_line(child.console)
                raise UserInputError(line or f"the run ended (exit code {child.proc.returncode}) before its session "
                                             f"started; its console: {child.console}")
            if time.monotonic() >= deadline:
                return None
            await asyncio.sleep(POLL_S)

    def _held_by(self, child: Child, log_path: Path, session_dir: Path | None) -> Path | None:
        candidates = [session_dir] if session_dir is not None else [
            p for p in (log_path.iterdir() if log_path.is_dir() else []) if p.is_dir() and not p.name.startswith(".")
            and p.stat().st_mtime >= child.started_at - 1]
        for folder in candidates:
            holder = SessionLock(folder).holder()
            if holder is not None and holder.pid == child.proc.pid and is_session_dir(folder):
                return folder
        return None

    def record(self, session: Path, config: str | None, child: Child) -> None:
        """Remember the run file a session was started with (resume reuses it)."""
        rec = RunRecord(session_id=session.name, config=config, console_log=str(child.console),
                        started_at=child.started_at)
        (session.parent / RUNS_DIR / f"{session.name}.json").write_text(rec.model_dump_json(), encoding="utf-8")

    @staticmethod
    def recorded(session: Path) -> RunRecord | None:
        try:
            text = (session.parent / RUNS_DIR / f"{session.name}.json").read_text(encoding="utf-8")
            return RunRecord.model_validate(json.loads(text))
        except (OSError, ValueError):
            return None

    def reap(self) -> None:
        """Collect the exit status of the runs that ended (no zombie is left behind for the server's lifetime)."""
        for child in self.children:
            child.proc.poll()

    def stop_attached(self, grace_s: float = STOP_GRACE_S) -> None:
        """The server is shutting down: SIGTERM every run not detached (each ends as after Ctrl-C, on its own
        time: its report is written after the server is gone) and wait ``grace_s`` for them."""
        attached = [c for c in self.children if not c.detached and c.proc.poll() is None]
        for child in attached:
            try:
                child.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                continue
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(c.proc.poll() is None for c in attached):
            time.sleep(0.05)
