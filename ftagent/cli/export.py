"""`ftagent export SESSION_DIR`: the best (or any) loop's model as a self-contained folder."""

from __future__ import annotations

from pathlib import Path

import typer

from ftagent.cli.common import prepare_env


def export(
    session: Path = typer.Argument(..., help="session directory (LOG_PATH/<session>)"),
    loop: int | None = typer.Option(None, "--loop", min=0, help="loop to export (default: the best loop)"),
    to: Path | None = typer.Option(None, "--to", help="target folder (missing or empty; default SESSION_DIR/export/loop_<N>)"),
    merge: bool = typer.Option(True, "--merge/--no-merge", help="merge a LoRA adapter into the base model, or keep the adapter"),
    push_to_hub: str | None = typer.Option(None, "--push-to-hub", help="also upload to this HF repo (HF_TOKEN); private"),
) -> None:
    """Export a session's model: the HF folder (LoRA merged by default), README.md (model card) and reproduce/."""
    prepare_env()
    from ftagent.core.settings import load_settings
    from ftagent.finetune.export import ExportRequest, export_model
    from ftagent.runners.factory import get_runner

    request = ExportRequest(session_dir=session, loop=loop, to=to, merge=merge, push_to_hub=push_to_hub)
    result = export_model(request, lambda: get_runner(load_settings()))  # the runner only after the checks
    typer.echo(f"exported loop {result.loop} ({result.kind}) to {result.folder}")
    if result.hub_url:
        typer.echo(f"pushed to {result.hub_url}")

