"""What kind of log folder a path is (see :func:`detect_layout`):

* a session: it holds ``events.jsonl`` or ``__session__/``;
* a folder of sessions (``LOG_PATH``);
* a job: a folder of task folders, each holding session folders (``job/run_ft_job.sh`` layout);
* a folder of jobs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from ftagent.engine.session import EVENTS_FILE, SESSION_DIR
from ftagent.jobs.tasks import load_job_plan

LayoutKind = Literal["missing", "empty", "session", "sessions", "job", "jobs"]


class Layout(BaseModel):
    kind: LayoutKind
    path: str
    children: list[str] = Field(default_factory=list)  # sessions, tasks or jobs (by kind)


def is_session_dir(path: Path) -> bool:
    return (path / EVENTS_FILE).is_file() or (path / SESSION_DIR).is_dir()


def _subdirs(path: Path) -> list[Path]:
    try:
        return sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return []


def _is_task_dir(path: Path) -> bool:
    return any(is_session_dir(c) for c in _subdirs(path))


def detect_layout(path: Path) -> Layout:
    """Tell what kind of log directory ``path`` is."""
    path = Path(path)
    if not path.is_dir():
        return Layout(kind="missing", path=str(path))
    if is_session_dir(path):
        return Layout(kind="session", path=str(path))
    subs = _subdirs(path)
    sessions = [s for s in subs if is_session_dir(s)]
    if sessions:
        return Layout(kind="sessions", path=str(path), children=[str(s) for s in sessions])
    plan = load_job_plan(path)
    tasks = [s for s in subs if _is_task_dir(s)]
    if plan is not None or tasks:
        names = [t.name for t in plan.tasks] if plan else []
        names += [t.name for t in tasks if t.name not in names]
        return Layout(kind="job", path=str(path), children=[str(path / n) for n in names])
    jobs = [s for s in subs if load_job_plan(s) is not None or any(_is_task_dir(t) for t in _subdirs(s))]
    if jobs:
        return Layout(kind="jobs", path=str(path), children=[str(j) for j in reversed(jobs)])
    return Layout(kind="empty", path=str(path))


def list_sessions(folder: Path) -> list[Path]:
    """Session directories directly under ``folder`` (oldest first: ids sort by time)."""
    return [p for p in _subdirs(Path(folder)) if is_session_dir(p)]


def signature(path: Path) -> tuple:
    """A cheap change marker of all events files under ``path`` (for caching and auto-refresh)."""
    path = Path(path)
    out = []
    for f in sorted(path.glob(f"**/{EVENTS_FILE}")) if path.is_dir() else []:
        try:
            st = f.stat()
            out.append((str(f), st.st_size, st.st_mtime_ns))
        except OSError:
            continue
    return tuple(out)
