"""`ftagent benchmarks list|show`: the benchmark registry."""

from __future__ import annotations

import typer

app = typer.Typer(help="List and inspect benchmark adapters.", no_args_is_help=True)


@app.command("list")
def benchmarks_list() -> None:
    """List benchmark keys with their category and core metric."""
    from ftagent.benchmarks import describe_all

    for row in describe_all():
        typer.echo(row)


@app.command("show")
def benchmarks_show(key: str) -> None:
    """Show one benchmark adapter in detail."""
    from ftagent.benchmarks import describe

    typer.echo(describe(key))
