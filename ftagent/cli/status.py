"""`ftagent status [SESSION] [--json]`: a session's state (or every session's line), for people and scripts."""

from __future__ import annotations

from pathlib import Path

import typer

from ftagent.cli.common import prepare_env


def status(
    session: str | None = typer.Argument(None, help="a session folder, or its id under LOG_PATH; none: every session"),
    as_json: bool = typer.Option(False, "--json", help="the status as JSON (the MCP server's status tool returns it)"),
) -> None:
    """Where a session is: running or how it ended, the current loop and step, scores with their 95 % intervals,
    the SOTA, the forecast. Without SESSION: one line per session under LOG_PATH."""
    prepare_env()
    from ftagent.core.settings import load_settings
    from ftagent.views.lookup import find_session, session_summaries
    from ftagent.views.status import session_status

    log_path = Path(load_settings().paths.log_path)
    if session is None:
        rows = session_summaries(log_path)
        if as_json:
            typer.echo("[" + ",\n".join(r.model_dump_json() for r in rows) + "]")
            return
        for r in rows:
            best = f"SOTA loop {r.sota_loop}: {r.sota_validation}" if r.sota_loop is not None else "no SOTA"
            typer.echo(f"{r.session_id}  {r.state:<11} {r.benchmark or '-'} / {r.base_model or '-'}  "
                       f"loops {r.loops_done}/{r.loop_n or '?'}  {best}")
        return
    found = session_status(find_session(session, log_path))
    if as_json:
        typer.echo(found.model_dump_json(indent=1))
        return
    from ftagent.views.status import status_lines

    for line in status_lines(found):
        typer.echo(line)
