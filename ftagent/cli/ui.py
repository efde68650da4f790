"""`ftagent ui`: the Streamlit UI over a log directory."""

from __future__ import annotations

from pathlib import Path

import typer


def ui(
    log_dir: Path = typer.Option(Path("log"), "--log-dir", help="folder with sessions or jobs"),
    port: int = typer.Option(19899, "--port"),
    host: str = typer.Option("127.0.0.1", "--host"),
) -> None:
    """Start the Streamlit UI over a log directory."""
    from ftagent.ui.launch import launch

    raise typer.Exit(launch(log_dir, host=host, port=port))
