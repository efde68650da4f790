"""Finding sessions by folder or id, and the one-line summary of each (``ftagent status``, the MCP tools)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from ftagent.core.errors import UserInputError
from ftagent.views.layout import is_session_dir, list_sessions
from ftagent.views.status import SessionStatus, State, session_status


def find_session(session: str | Path, log_path: Path) -> Path:
    """A session folder given as its path or as its id under ``log_path`` (``LOG_PATH``).

    Raises:
        UserInputError: neither names a session (exit 2).
    """
    given = Path(session).expanduser()
    if is_session_dir(given):
        return given.absolute()
    by_id = Path(log_path) / str(session)
    if not any(part in ("..", "") for part in Path(str(session)).parts) and is_session_dir(by_id):
        return by_id.absolute()
    raise UserInputError(f"no session '{session}': neither a session folder (with events.jsonl) nor a session id "
                         f"under LOG_PATH ({log_path})")


class SessionSummary(BaseModel):
    """One session in a list: its id, folder, state and best scores so far."""

    session_id: str
    dir: str
    state: State
    benchmark: str | None = None
    base_model: str | None = None
    loops_done: int = 0
    loop_n: int | None = None
    sota_loop: int | None = None
    sota_validation: float | None = None
    baseline_validation: float | None = None
    updated_at: float | None = None

    @classmethod
    def of(cls, status: SessionStatus) -> SessionSummary:
        return cls(session_id=status.session_id, dir=status.dir, state=status.state, benchmark=status.benchmark,
                   base_model=status.base_model, loops_done=status.loops_done, loop_n=status.loop_n,
                   sota_loop=status.sota.loop if status.sota else None,
                   sota_validation=status.sota.validation if status.sota else None,
                   baseline_validation=status.baseline.get("validation"), updated_at=status.updated_at)


def session_summaries(log_path: Path) -> list[SessionSummary]:
    """Every session directly under ``log_path``, oldest first."""
    return [SessionSummary.of(session_status(folder)) for folder in list_sessions(Path(log_path))]
