"""`ftagent models ...` commands: build and list base models."""

from __future__ import annotations

import typer

from ftagent.cli import _prepare_env, models_app


@models_app.command("build")
def models_build(
    name: str = typer.Argument(..., help="built-in model, e.g. tiny-qwen2 (or builtin/tiny-qwen2)"),
    seed: int | None = typer.Option(None, "--seed", help="initialisation seed (tiny-qwen2: 2)"),
    force: bool = typer.Option(False, "--force", help="rebuild even when built"),
) -> None:
    """Build a built-in model into FT_FILE_PATH/models/builtin/<name> with the tool env's python."""
    from ftagent.errors import EnvironmentFailure
    from ftagent.models.builtin import BUILTIN_PREFIX, build_builtin, builtin_dir
    from ftagent.settings import load_settings
    from ftagent.toolenv import tools_env_path, tools_python

    _prepare_env()
    settings = load_settings()
    key = name[len(BUILTIN_PREFIX):] if name.startswith(BUILTIN_PREFIX) else name
    python = tools_python(tools_env_path(settings))
    if not python.exists():
        raise EnvironmentFailure(f"no tool env python at {python}; run `ftagent env setup` first")
    out = build_builtin(key, builtin_dir(settings.ft.file_path, key), python, seed=seed, force=force)
    typer.echo(str(out))


@models_app.command("list")
def models_list() -> None:
    """List built-in models (with build status) and model folders under FT_FILE_PATH/models."""
    from ftagent.models.builtin import list_models
    from ftagent.settings import load_settings

    _prepare_env()
    for row in list_models(load_settings().ft.file_path):
        typer.echo(f"{row['name']:40s} {row['status']:10s} {row['description']}")
