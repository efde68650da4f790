"""`ftagent models ...` commands: build and list base models."""

from __future__ import annotations

import typer

from ftagent.cli.common import prepare_env

app = typer.Typer(help="Build and list base models (builtin/tiny-qwen2 ...).", no_args_is_help=True)


@app.command("build")
def models_build(
    name: str = typer.Argument(..., help="built-in model, e.g. tiny-qwen2 (or builtin/tiny-qwen2)"),
    seed: int | None = typer.Option(None, "--seed", help="initialisation seed (tiny-qwen2: 2)"),
    force: bool = typer.Option(False, "--force", help="rebuild even when built"),
) -> None:
    """Build a built-in model into FT_FILE_PATH/models/builtin/<name> with the tool env's python."""
    from ftagent.core.errors import EnvironmentFailure
    from ftagent.core.settings import load_settings
    from ftagent.models.builtin import BUILTIN_PREFIX, build_builtin, builtin_dir
    from ftagent.runners.toolenv import tools_env_path, tools_python

    prepare_env()
    settings = load_settings()
    key = name[len(BUILTIN_PREFIX):] if name.startswith(BUILTIN_PREFIX) else name
    python = tools_python(tools_env_path(settings))
    if not python.exists():
        raise EnvironmentFailure(f"no tool env python at {python}; run `ftagent env setup` first")
    out = build_builtin(key, builtin_dir(settings.ft.file_path, key), python, seed=seed, force=force)
    typer.echo(str(out))


@app.command("list")
def models_list(
    as_json: bool = typer.Option(False, "--json", help="the rows as JSON (the MCP server's models tool)"),
) -> None:
    """List built-in models (with build status) and model folders under FT_FILE_PATH/models."""
    import json

    from ftagent.core.settings import load_settings
    from ftagent.models.base_model import list_models

    prepare_env()
    rows = list_models(load_settings().ft.file_path)
    if as_json:
        typer.echo(json.dumps(rows, indent=1))
        return
    for row in rows:
        typer.echo(f"{row['name']:40s} {row['status']:10s} {row['description']}")
