"""`ftagent benchmarks list|show`: the benchmark registry (built-in YAML files, FT_BENCHMARK_PATHS, plug-ins)."""

from __future__ import annotations

import typer

app = typer.Typer(help="List and inspect benchmarks (configs/benchmarks/*.yaml, FT_BENCHMARK_PATHS, plug-ins).",
                  no_args_is_help=True)


@app.command("list")
def benchmarks_list(
    as_json: bool = typer.Option(False, "--json", help="every benchmark's spec as JSON (the MCP benchmarks tool)"),
) -> None:
    """List benchmark keys with their category and core metric."""
    from ftagent.benchmarks import benchmark_specs, describe_all
    from ftagent.benchmarks.base import DESCRIBE_HEADER

    if as_json:
        typer.echo("[" + ",\n".join(s.model_dump_json() for s in benchmark_specs()) + "]")
        return
    typer.echo(DESCRIBE_HEADER)
    for row in describe_all():
        typer.echo(row)


@app.command("show")
def benchmarks_show(key: str = typer.Argument(..., help="a benchmark key, or a benchmark YAML file")) -> None:
    """Show one benchmark in detail (a key, or a file such as ./my_bench.yaml)."""
    from ftagent.benchmarks import describe

    typer.echo(describe(key))
