"""What ftagent started, written down as it starts, so a successor can end what a killed run left.

Every tool process group (the supervisor of :mod:`ftagent.runners.supervise` leads it) and every Docker
container a runner starts is recorded as one JSON file under the registry folder while it runs
(``FT_FILE_PATH/run/children/``; the record names the session). The file is removed when the command
ends, so a file that is still there and whose owner (pid + start time + host) is dead names a leftover.
:func:`reap_leftovers`, called before a session (new or resumed) starts work, ends those: the process
group's members (checked by start time, so a reused pid is never hit) and the containers, and returns
what it ended for the session's ``leftovers_reaped`` event.

The registry is process-wide (:func:`activate`): the runners are built before the session exists and
the commands of the scenario preparation run before it has an id.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
import uuid
from pathlib import Path
from typing import Literal, NamedTuple

from pydantic import BaseModel, Field, ValidationError

REGISTRY_DIR = Path("run") / "children"
SESSION_LABEL = "org.ftagent.session"
OWNER_LABEL = "org.ftagent.owner"  # the same key as supervise.OWNER_LABEL (a script, not imported)


class Owner(BaseModel):
    """The ftagent process that started a child: pid, host and start time (against pid reuse)."""

    pid: int
    host: str
    started: float

    @classmethod
    def current(cls) -> Owner:
        return cls(pid=os.getpid(), host=socket.gethostname(), started=_create_time(os.getpid()) or 0.0)

    @property
    def label(self) -> str:
        """``host:pid:start`` (a Docker label value)."""
        return f"{self.host}:{self.pid}:{self.started:.2f}"

    def alive(self) -> bool:
        """True when this process still runs (or runs on another host: never judged from here)."""
        if self.host != socket.gethostname():
            return True
        created = _create_time(self.pid)
        return created is not None and abs(created - self.started) < 1.0


class ChildRecord(BaseModel):
    """One running tool process group or container."""

    kind: Literal["process", "container"]
    owner: Owner
    session: str | None = None
    pgid: int | None = None  # the group leader's pid (process)
    leader_started: float | None = None
    container: str | None = None  # container id (container)
    command: str = ""
    started_at: float = Field(default_factory=time.time)


class Reaped(BaseModel):
    """What :func:`reap_leftovers` ended."""

    processes: list[dict] = Field(default_factory=list)  # {pid, command, session}
    containers: list[str] = Field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.processes and not self.containers

    def summary(self) -> str:
        """One line for the event and the console."""
        parts = []
        if self.processes:
            sessions = sorted({str(p.get("session") or "before a session") for p in self.processes})
            parts.append(f"{len(self.processes)} process(es) of {', '.join(sessions)}")
        if self.containers:
            parts.append(f"{len(self.containers)} container(s)")
        return "ended what a killed predecessor left running: " + "; ".join(parts)


_state: dict[str, object] = {"dir": None, "session": None}
_running: set[int] = set()  # process groups of this process's commands that have not ended yet


class Recorded(NamedTuple):
    """A started child as :func:`forget` needs it: its record file (None: registry off) and process group."""

    path: Path | None
    pgid: int | None = None


def _create_time(pid: int) -> float | None:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def registry_dir(file_path: Path) -> Path:
    """``FT_FILE_PATH/run/children``."""
    return Path(file_path) / REGISTRY_DIR


def activate(directory: Path | None, session: str | None = None) -> None:
    """Record every child from now on under ``directory`` (None: stop recording)."""
    _state["dir"] = Path(directory) if directory is not None else None
    _state["session"] = session


def set_session(session: str | None) -> None:
    """Tag the records written from now on with this session id."""
    _state["session"] = session


def current_session() -> str | None:
    """The session id new records carry (also the Docker session label)."""
    value = _state["session"]
    return value if isinstance(value, str) else None


def _write(record: ChildRecord) -> Path | None:
    directory = _state["dir"]
    if not isinstance(directory, Path):
        return None
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{record.owner.pid}-{uuid.uuid4().hex[:8]}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(record.model_dump_json(), encoding="utf-8")
    os.replace(tmp, path)
    return path


def record_process(pgid: int, command: list[str]) -> Recorded:
    """Write down a process group that just started (the file only when the registry is on)."""
    _running.add(pgid)
    return Recorded(_write(ChildRecord(kind="process", owner=Owner.current(), session=current_session(),
                                       pgid=pgid, leader_started=_create_time(pgid),
                                       command=" ".join(command)[:300])), pgid)


def record_container(container_id: str, command: list[str]) -> Recorded:
    """Write down a container that just started (the file only when the registry is on)."""
    return Recorded(_write(ChildRecord(kind="container", owner=Owner.current(), session=current_session(),
                                       container=container_id, command=" ".join(command)[:300])))


def forget(record: Recorded | None) -> None:
    """The child ended: drop its record."""
    if record is None:
        return
    if record.pgid is not None:
        _running.discard(record.pgid)
    if record.path is not None:
        record.path.unlink(missing_ok=True)


def kill_running_groups(sig: int = signal.SIGKILL) -> list[int]:
    """Signal every process group this process started that has not ended (safe in a signal handler).

    The SIGTERM handler calls it first, so the tools stop within milliseconds rather than after the
    interpreter has unwound to the runner's ``finally`` (which still kills what is left).
    """
    hit = []
    for pgid in list(_running):
        try:
            os.killpg(pgid, sig)
            hit.append(pgid)
        except OSError:
            _running.discard(pgid)
    return hit


def group_members(pgid: int, not_before: float) -> list:
    """The live processes of group ``pgid`` that started at or after ``not_before`` (psutil objects)."""
    import psutil

    members = []
    for proc in psutil.process_iter(["create_time"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["create_time"] >= not_before - 1.0:
                members.append(proc)
        except (OSError, psutil.Error):
            continue
    return members


def _end_group(record: ChildRecord) -> list[int]:
    import psutil

    if record.pgid is None:
        return []
    members = group_members(record.pgid, record.leader_started or record.started_at)
    for proc in members:
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
    psutil.wait_procs(members, timeout=5)
    return [p.pid for p in members]


def _load(path: Path) -> ChildRecord | None:
    try:
        return ChildRecord.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, ValidationError):
        return None


def reap_leftovers(directory: Path, *, docker_client=None) -> Reaped:
    """End the children recorded under ``directory`` whose owner is dead; drop their records.

    Args:
        directory: the registry folder (:func:`registry_dir`).
        docker_client: used for recorded containers and for any container whose ``org.ftagent.owner``
            label names a dead process of this host (None: containers are left to the Docker runner).

    Returns:
        What was ended (empty when nothing was left).
    """
    reaped = Reaped()
    for path in sorted(Path(directory).glob("*.json")) if Path(directory).is_dir() else []:
        record = _load(path)
        if record is None:
            path.unlink(missing_ok=True)  # half-written by a killed writer: nothing to act on
            continue
        if record.owner.alive():
            continue  # a concurrent ftagent on the same FT_FILE_PATH: its children are its own
        if record.kind == "process":
            if _end_group(record):
                reaped.processes.append({"pid": record.pgid, "command": record.command, "session": record.session})
        elif docker_client is not None and record.container:
            if _remove_container(docker_client, record.container):
                reaped.containers.append(record.container)
        elif record.kind == "container":
            continue  # keep the record until a Docker-capable reaper sees it
        path.unlink(missing_ok=True)
    if docker_client is not None:
        reaped.containers += [c for c in _reap_labelled(docker_client) if c not in reaped.containers]
    return reaped


def _remove_container(client, container_id: str) -> bool:
    try:
        client.containers.get(container_id).remove(force=True)
        return True
    except Exception:  # noqa: BLE001 - docker.errors.NotFound: already gone
        return False


def _reap_labelled(client) -> list[str]:
    """Containers of this host whose ``org.ftagent.owner`` process is dead (records lost or never written)."""
    removed: list[str] = []
    try:
        # sparse: one request, no per-container inspect (which fails for one removed meanwhile)
        containers = client.containers.list(all=True, sparse=True, filters={"label": OWNER_LABEL})
    except Exception:  # noqa: BLE001 - engine gone: nothing to do
        return removed
    for container in containers:
        owner = _owner_from_label((container.attrs.get("Labels") or {}).get(OWNER_LABEL, ""))
        if owner is not None and not owner.alive() and _remove_container(client, container.id):
            removed.append(container.id)
    return removed


def _owner_from_label(value: str) -> Owner | None:
    try:
        host, pid, started = value.rsplit(":", 2)
        return Owner(pid=int(pid), host=host, started=float(started))
    except ValueError:
        return None
