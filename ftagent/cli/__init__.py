"""The command line: ``ftagent.cli.main`` assembles one Typer app per command group.

Public API: :data:`app` (the root Typer app) and :func:`main` (the console-script entry point).
"""

from ftagent.cli.main import app, main

__all__ = ["app", "main"]
