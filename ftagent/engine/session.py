"""Sessions: one directory per ``llm_finetune`` run, JSON snapshots after every step, resume.

Layout of a session directory::

    <LOG_PATH>/<session_id>/
        events.jsonl
        __session__/<loop>/<seq>_<step>     JSON snapshot written after that step
    __session__/<loop>/<seq>_<step>.<n> the same, numbered by the session's step count once trials run
                                        at once (the newest snapshot is the highest n, whatever its loop)
        llm/<n>.json                        one file per LLM call
        .lock, .lock.holder.json            held by the process working in it (:class:`SessionLock`)

A snapshot is a :class:`SessionState` as JSON. Loading one never executes code. Writes are atomic
(temp file + rename), so a SIGKILL leaves either the old or the new snapshot, never half of one.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
import uuid
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Generic, TypeVar, overload

from pydantic import BaseModel, Field, ValidationError

from ftagent.core.errors import EnvironmentFailure, StepFailure, UserInputError
from ftagent.core.redact import mask_text
from ftagent.engine.event_log import EventLog

SNAPSHOT_SCHEMA = 1
SESSION_DIR = "__session__"
EVENTS_FILE = "events.jsonl"
LOCK_FILE = ".lock"
HOLDER_FILE = ".lock.holder.json"


class LockHolder(BaseModel):
    """Who runs a session: written next to the lock once it is held (the lock file itself is the OS lock)."""

    pid: int
    host: str
    started_at: float

    def describe(self) -> str:
        when = datetime.fromtimestamp(self.started_at, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        return f"pid {self.pid} on {self.host}, since {when}"


class SessionLock:
    """An exclusive lock on one session directory while an ftagent process works in it.

    The lock is an OS file lock (``filelock``): a killed holder releases it with its death, so a stale lock
    never blocks a resume. A second process gets :class:`UserInputError` naming the holder.
    """

    def __init__(self, directory: Path) -> None:
        from filelock import FileLock

        self.dir = Path(directory)
        self._lock = FileLock(str(self.dir / LOCK_FILE), timeout=0)

    def holder(self) -> LockHolder | None:
        """The recorded holder (of the lock now held, or the last one)."""
        try:
            return LockHolder.model_validate_json((self.dir / HOLDER_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def acquire(self) -> SessionLock:
        """Take the lock or fail at once.

        Raises:
            UserInputError: another process holds it (the message names it: pid, host, start time).
        """
        from filelock import Timeout

        try:
            self._lock.acquire()
        except Timeout:
            holder = self.holder()
            who = holder.describe() if holder else "another ftagent process"
            raise UserInputError(
                f"session {self.dir} is in use by {who}; wait for it to end (or stop it), or resume a copy "
                f"with --no-checkout") from None
        write_atomic(self.dir / HOLDER_FILE, LockHolder(pid=os.getpid(), host=socket.gethostname(),
                                                        started_at=time.time()).model_dump_json())
        return self

    def release(self) -> None:
        """Let the next process in (the holder record stays, for the record)."""
        self._lock.release()

    @property
    def held(self) -> bool:
        return self._lock.is_locked


class LoopState(BaseModel):
    """The engine's part of one loop: its index, failure and jumps back.

    A workflow subclasses it with typed fields that its steps read and write (see
    :class:`ftagent.finetune.state.FinetuneLoop`); the engine never looks inside them.
    """

    index: int
    failure: StepFailure | None = None
    gotos: dict[str, int] = Field(default_factory=dict)  # target step -> times jumped back
    started_at: float = Field(default_factory=time.time)
    # Seconds this loop's steps actually ran, summed over every process run (issue 32): a resume or a
    # fork days later must not count the gap; :class:`~ftagent.engine.events.LoopEnd` reports this.
    running_s: float = 0.0
    # K trials at once (ftagent.engine.parallel): the loop's next step and the slot it runs on
    next_step: int = 0
    slot: int | None = None


class SessionState(BaseModel):
    """Everything the engine needs to continue a session after any step.

    An application subclasses it with its own typed state (``FinetuneSessionState`` adds the
    scenario and the trace, and types ``current``); :meth:`Session.load` validates a snapshot with
    the class it is given.
    """

    schema_version: int = SNAPSHOT_SCHEMA
    session_id: str
    created_at: float = Field(default_factory=time.time)
    config: dict[str, Any] = Field(default_factory=dict)  # run settings (redacted), for the record
    loop_index: int = 0
    step_index: int = 0  # the next step to run within ``loop_index``
    current: LoopState | None = None
    elapsed_s: float = 0.0  # wall time used by earlier runs of this session (for the timeout)
    steps_done: int = 0
    event_count: int = 0  # lines of events.jsonl that belong to this snapshot
    last_step: str | None = None
    # the loops in flight when K trials run at once (ftagent.engine.parallel); ``current`` is unused then
    running: Sequence[LoopState] = Field(default_factory=list)  # a workflow types its own loops
    # snapshots carry the step count in their name (``<seq>_<step>.<n>``): set once trials ran at once
    ordered_snapshots: bool = False


#: a session's state class: the engine's :class:`SessionState` or an application's subclass
#: (``FinetuneSessionState``); a :class:`Session` and its step contexts are typed with it
S = TypeVar("S", bound=SessionState)


def new_session_id() -> str:
    """A sortable, unique session id: UTC timestamp plus a short random suffix."""
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d_%H-%M-%S")
    return f"{stamp}_{uuid.uuid4().hex[:6]}"


def snapshot_name(seq: int, step: str, order: int | None = None) -> str:
    return f"{seq}_{step}" if order is None else f"{seq}_{step}.{order:06d}"


def snapshot_order(path: Path) -> int | None:
    """The step count in an ordered snapshot's name (``3_train.000017`` → 17), None for ``3_train``."""
    _, _, tail = path.name.rpartition(".")
    return int(tail) if "." in path.name and tail.isdigit() else None


def _sort_key(path: Path) -> tuple[int, int, int]:
    """Ordered snapshots by their step count (after every unordered one: those came first), the others by
    (loop, step): the last in this order is the newest snapshot."""
    seq = path.name.split("_", 1)[0]
    order = snapshot_order(path)
    return (-1 if order is None else order), int(path.parent.name), int(seq)


def list_snapshots(session_dir: Path) -> list[Path]:
    """All snapshot files of a session, in (loop, seq) order."""
    root = session_dir / SESSION_DIR
    if not root.is_dir():
        return []
    files = [
        p
        for p in root.glob("*/*")
        if p.is_file() and p.parent.name.isdigit() and p.name.split("_", 1)[0].isdigit()
    ]
    return sorted(files, key=_sort_key)


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temp file and a rename (fsynced), secrets masked.

    The writer of snapshots and reports: whatever it writes passes :func:`ftagent.core.redact.mask_text`.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(mask_text(text))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a half-written temp file (disk full) never lingers
        raise


class Session(Generic[S]):
    """A session directory plus its current state (an ``S``: :class:`SessionState` or the application's
    subclass, as it was created or loaded) and its one :class:`EventLog`."""

    def __init__(self, directory: Path, state: S) -> None:
        self.dir = directory
        self.state = state
        self.events = EventLog(directory / EVENTS_FILE)
        self._lock: SessionLock | None = None

    def lock(self) -> SessionLock:
        """Hold this session's lock until :meth:`unlock` or the end of the process (see :class:`SessionLock`).

        Raises:
            UserInputError: another process works in this session (named in the message).
        """
        if self._lock is None:
            self._lock = SessionLock(self.dir).acquire()
        return self._lock

    def unlock(self) -> None:
        """Release the lock taken with :meth:`lock` (no-op without one)."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    @property
    def events_path(self) -> Path:
        return self.dir / EVENTS_FILE

    @property
    def llm_dir(self) -> Path:
        return self.dir / "llm"

    @overload
    @staticmethod
    def create(log_path: Path, config: dict[str, Any] | None = None) -> Session[SessionState]: ...

    @overload
    @staticmethod
    def create(log_path: Path, config: dict[str, Any] | None = None, *, state_cls: type[S],
               **state: Any) -> Session[S]: ...

    @staticmethod
    def create(log_path: Path, config: dict[str, Any] | None = None, *,
               state_cls: type[SessionState] = SessionState, **state: Any) -> Session[Any]:
        """Start a new session directory under ``log_path`` with a fresh ``state_cls`` state."""
        sid = new_session_id()
        directory = Path(log_path) / sid
        directory.mkdir(parents=True, exist_ok=False)
        return Session(directory, state_cls(session_id=sid, config=config or {}, **state))

    def save(self, loop: int, seq: int, step: str, order: int | None = None) -> Path:
        """Write the snapshot taken after step ``seq`` of ``loop``; drop now-stale later ones.

        A step can run twice in one loop (validate → code), so snapshots that sort after this one in
        the same loop belong to an earlier round and would mislead a resume: they are removed. ``order``
        (the session's step count) names an ordered snapshot (K trials at once): then only this loop's
        snapshots of later steps, from an earlier round, are stale; other loops' are not.
        """
        path = self.dir / SESSION_DIR / str(loop) / snapshot_name(seq, step, order)
        try:
            write_atomic(path, self.state.model_dump_json(indent=1))  # secrets masked by write_atomic
        except OSError as exc:  # disk full, quota, read-only file system: the previous snapshot is intact
            snaps = list_snapshots(self.dir)
            previous = f"resume with --path {snaps[-1]}" if snaps else "no earlier snapshot exists"
            raise EnvironmentFailure(
                f"cannot write the session snapshot {path}: {exc.strerror or exc} (errno {exc.errno}). "
                f"Nothing earlier was lost: free space under {self.dir.parent}, then {previous}") from exc
        for other in list_snapshots(self.dir):
            if order is None and _sort_key(other) > _sort_key(path):
                other.unlink(missing_ok=True)
            elif order is not None and other.parent == path.parent and other != path and (
                    int(other.name.split("_", 1)[0]) >= seq):
                other.unlink(missing_ok=True)
        return path

    @overload
    @staticmethod
    def load(path: Path) -> tuple[Session[SessionState], Path]: ...

    @overload
    @staticmethod
    def load(path: Path, state_cls: type[S]) -> tuple[Session[S], Path]: ...

    @staticmethod
    def load(path: Path, state_cls: type[SessionState] = SessionState) -> tuple[Session[Any], Path]:
        """Load a snapshot file, or the latest snapshot of a session directory.

        The snapshot is validated as ``state_cls`` (the engine's own fields by default; an
        application passes its subclass). Returns the session and the snapshot file it came from.

        Raises:
            UserInputError: when ``path`` is not a snapshot or is corrupted or incompatible.
        """
        path = Path(path)
        if path.is_dir():
            session_dir = path.parent if path.name == SESSION_DIR else path
            snaps = list_snapshots(session_dir)
            if not snaps:
                raise UserInputError(f"--path {path}: no snapshots under {session_dir / SESSION_DIR}")
            snapshot = snaps[-1]
        elif path.is_file():
            if path.parent.parent.name != SESSION_DIR:
                raise UserInputError(
                    f"--path {path} is not a snapshot (expected <session>/{SESSION_DIR}/<loop>/<seq>_<step>)"
                )
            snapshot, session_dir = path, path.parent.parent.parent
        else:
            raise UserInputError(f"--path {path} does not exist")
        try:
            state = _read_snapshot(snapshot, state_cls)
        except UserInputError as exc:
            if path.is_dir():  # the newest is unreadable: name the newest good one, never skip silently
                good = next((p for p in reversed(snaps[:-1]) if _readable(p, state_cls)), None)
                if good is not None:
                    raise UserInputError(f"{exc}. The previous good snapshot is {good}: resume from it with "
                                         f"--path {good} (the steps after it run again)") from exc
            raise
        return Session(session_dir, state), snapshot

    def checkout(self, snapshot: Path) -> None:
        """Make ``snapshot`` the head: delete later snapshots and truncate later events."""
        for other in list_snapshots(self.dir):
            if _sort_key(other) > _sort_key(snapshot):
                other.unlink(missing_ok=True)
        for loop_dir in (self.dir / SESSION_DIR).iterdir():
            if loop_dir.is_dir() and not any(loop_dir.iterdir()):
                loop_dir.rmdir()
        self.events.truncate(self.state.event_count)

    def fork(self, log_path: Path) -> Session[S]:
        """Continue in a new session directory (``--no-checkout``), leaving the original untouched.

        Events up to the snapshot are copied so the new session's log is complete on its own.
        """
        sid = new_session_id()
        directory = log_path / sid
        directory.mkdir(parents=True, exist_ok=False)
        if self.events_path.exists():
            shutil.copyfile(self.events_path, directory / EVENTS_FILE)
            EventLog(directory / EVENTS_FILE).truncate(self.state.event_count)
        if self.llm_dir.is_dir():
            shutil.copytree(self.llm_dir, directory / "llm")
        state = self.state.model_copy(deep=True)
        state.session_id = sid
        state.config = {**state.config, "forked_from": str(self.dir)}
        return Session(directory, state)


def _read_snapshot(snapshot: Path, state_cls: type[S]) -> S:
    """Parse and validate one snapshot file (UserInputError when corrupted or incompatible)."""
    try:
        raw = json.loads(snapshot.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserInputError(f"snapshot {snapshot} is corrupted (not JSON): {exc}") from exc
    if not isinstance(raw, dict) or raw.get("schema_version") != SNAPSHOT_SCHEMA:
        found = raw.get("schema_version") if isinstance(raw, dict) else None
        raise UserInputError(
            f"snapshot {snapshot} has schema version {found!r}; this ftagent reads {SNAPSHOT_SCHEMA}"
        )
    try:
        state = state_cls.model_validate(raw)
    except ValidationError as exc:
        raise UserInputError.from_validation(exc, f"snapshot {snapshot} is incompatible") from exc
    return state


def _readable(snapshot: Path, state_cls: type[SessionState]) -> bool:
    try:
        _read_snapshot(snapshot, state_cls)
    except UserInputError:
        return False
    return True
