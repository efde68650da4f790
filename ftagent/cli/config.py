"""`ftagent config show [RUN_FILE]`: the recipe a run would get, each value with where it came from."""

from __future__ import annotations

from pathlib import Path

import typer

from ftagent.cli.common import prepare_env

app = typer.Typer(help="The recipe of a run: a run file's options and settings, resolved.", no_args_is_help=True)


@app.command("show")
def config_show(
    run_file: Path | None = typer.Argument(None, help="a run file (llm_finetune --config); none: the environment's"),
    show_all: bool = typer.Option(False, "--all", help="also the options and settings left at their defaults"),
    as_json: bool = typer.Option(False, "--json", help="the resolved recipe as JSON (every value, with its source)"),
) -> None:
    """Print the resolved recipe: each option and setting, its value, and where it came from (flag > environment >
    run file > .env > default)."""
    prepare_env()
    from ftagent.core.recipe import resolve_recipe
    from ftagent.core.run_config import load_run_file

    recipe = resolve_recipe(load_run_file(run_file) if run_file is not None else None)
    if as_json:
        typer.echo(recipe.model_dump_json(indent=1))
        return
    shown = recipe.values if show_all else recipe.changed()
    typer.echo(f"run file: {recipe.run_file or '(none)'}")
    width = max((len(v.key) for v in shown), default=10) + 2
    for v in shown:
        value = "-" if v.value is None else (v.value if isinstance(v.value, str) else _json(v.value))
        where = v.source + (f" ({v.via})" if v.via and v.source in ("environment", ".env") else "")
        typer.echo(f"{v.key:<{width}}{value:<32} {where}")
    if not show_all:
        typer.echo(f"({len(recipe.values) - len(shown)} more at their defaults: --all shows them)")


def _json(value: object) -> str:
    import json

    return json.dumps(value)
