"""A job as its readers see it: its tasks (:class:`TaskView`), each with its sessions, from a job folder, a
folder of sessions or one session (:func:`load_job`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ftagent.jobs.tasks import JobPlan, load_job_plan
from ftagent.views.layout import LayoutKind, detect_layout, list_sessions
from ftagent.views.session import load_session_cached
from ftagent.views.session_view import SessionView


class TaskView(BaseModel):
    name: str
    dir: str
    sessions: list[SessionView] = Field(default_factory=list)
    spec: dict[str, Any] = Field(default_factory=dict)
    exit_code: int | None = None

    @property
    def latest(self) -> SessionView | None:
        return self.sessions[-1] if self.sessions else None

    @property
    def state(self) -> str:
        """waiting | running | finished | exited (process ended without a session_end)."""
        s = self.latest
        if s is None:
            return "waiting" if self.exit_code is None else "exited"
        if s.end is not None:
            return "finished"
        return "running" if self.exit_code is None else "exited"


class JobView(BaseModel):
    dir: str
    kind: LayoutKind
    tasks: list[TaskView] = Field(default_factory=list)
    plan: JobPlan | None = None


def _exit_code(job_dir: Path, name: str) -> int | None:
    try:
        return int((job_dir / ".run" / f"{name}.exit").read_text().strip())
    except (OSError, ValueError):
        return None


def load_job(path: Path) -> JobView:
    """Load a job, a folder of sessions or a single session as tasks (one row each in the summary).

    Sessions come from :func:`load_session_cached`: only those whose files changed are parsed again.
    """
    layout = detect_layout(Path(path))
    job = JobView(dir=str(path), kind=layout.kind)
    if layout.kind == "session":
        job.tasks = [TaskView(name=Path(path).name, dir=str(path), sessions=[load_session_cached(Path(path))])]
    elif layout.kind == "sessions":
        job.tasks = [TaskView(name=Path(s).name, dir=s, sessions=[load_session_cached(Path(s))])
                     for s in layout.children]
    elif layout.kind == "job":
        job.plan = load_job_plan(Path(path))
        specs = {t.name: t.spec.model_dump() for t in job.plan.tasks} if job.plan else {}
        for child in map(Path, layout.children):
            job.tasks.append(TaskView(name=child.name, dir=str(child), spec=specs.get(child.name, {}),
                                      sessions=[load_session_cached(s) for s in list_sessions(child)],
                                      exit_code=_exit_code(Path(path), child.name)))
    return job
