"""`ftagent job ...` commands."""

from __future__ import annotations

from pathlib import Path

import typer

from ftagent.cli import job_app

_STYLE = {"green": "green", "red": "red", "blue": "blue", "": ""}


@job_app.command("status")
def status(job_dir: Path = typer.Argument(..., help="job folder (log/<job_id>), a folder of sessions or a session")) -> None:
    """Tasks × loops with validation / test core scores, baseline, best and task state."""
    from rich.console import Console
    from rich.table import Table

    from ftagent.ui import data

    layout = data.detect_layout(job_dir)
    if layout.kind == "missing":
        typer.secho(f"error: {job_dir} does not exist", fg=typer.colors.RED, err=True)
        raise typer.Exit(2)
    if layout.kind in ("empty", "jobs"):
        hint = f"; pick one of: {', '.join(Path(c).name for c in layout.children)}" if layout.children else ""
        typer.secho(f"error: {job_dir} holds no tasks or sessions{hint}", fg=typer.colors.RED, err=True)
        raise typer.Exit(2)
    job = data.load_job(job_dir)
    rows, colours = data.summary_rows(job)
    table = Table(title=f"job {Path(job_dir).resolve().name}  (cells: validation / test)")
    for col in rows[0].keys() if rows else ["Task"]:
        table.add_column(col, no_wrap=col == "Task")
    for row, colour in zip(rows, colours, strict=True):
        cells = [f"[{_STYLE[colour[k]]}]{v}[/]" if colour.get(k) else str(v) for k, v in row.items()]
        table.add_row(*cells)
    console = Console(width=max(120, 24 + 14 * len(rows[0]) if rows else 120))
    console.print(table)
    stats = data.job_stats(job)
    console.print("  ".join(f"{k}: {v}" for k, v in stats.items()))
