"""`ftagent export SESSION_DIR`: the best (or any) loop's model as a self-contained folder."""

from __future__ import annotations

from pathlib import Path

import typer

from ftagent.cli.common import prepare_env

# a group with one callback: interspersed options so that `export SESSION --loop 1` parses like a command
app = typer.Typer(help="Export a session's model: HF folder, model card, reproduce/.", invoke_without_command=True,
                  context_settings={"allow_interspersed_args": True})


@app.callback(invoke_without_command=True)
def export(
    session: Path = typer.Argument(..., help="session directory (LOG_PATH/<session>)"),
    loop: int | None = typer.Option(None, "--loop", min=0, help="loop to export (default: the best loop)"),
    to: Path | None = typer.Option(None, "--to", help="target folder (missing or empty; default SESSION_DIR/export/loop_<N>)"),
    merge: bool = typer.Option(True, "--merge/--no-merge", help="merge a LoRA adapter into the base model, or keep the adapter"),
    push_to_hub: str | None = typer.Option(None, "--push-to-hub", help="also upload to this HF repo (HF_TOKEN); private"),
) -> None:
    """Write the model (LoRA merged by default), README.md (model card) and reproduce/ for one loop."""
    prepare_env()
    from ftagent.core.settings import load_settings
    from ftagent.finetune.export import ExportRequest, export_model
    from ftagent.runners.factory import get_runner

    request = ExportRequest(session_dir=session, loop=loop, to=to, merge=merge, push_to_hub=push_to_hub)
    result = export_model(request, lambda: get_runner(load_settings()))  # the runner only after the checks
    typer.echo(f"exported loop {result.loop} ({result.kind}) to {result.folder}")
    if result.hub_url:
        typer.echo(f"pushed to {result.hub_url}")

