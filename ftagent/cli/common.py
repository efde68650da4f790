"""Helpers every command module shares: the one error format and the `.env` check."""

from __future__ import annotations

import typer


def fail(message: str, code: int = 2) -> None:
    """Print one red error line and exit with ``code`` (2 = bad input, 1 = environment)."""
    print_error(message)
    raise typer.Exit(code)


def print_error(message: str) -> None:
    """The single error format of the CLI."""
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)


def prepare_env() -> None:
    """Validate and load ``./.env`` (malformed → exit 2) before any settings are read."""
    from ftagent.core.envfile import load_env_file

    load_env_file()
