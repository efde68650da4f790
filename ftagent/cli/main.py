"""The root ``ftagent`` command: it only assembles the command groups (each module owns its app).

Start-up must stay fast: no module here imports anything heavy (no litellm, torch, datasets,
streamlit) at import time; every command imports what it needs inside its body.
``tests/unit/test_cli.py`` checks it.
"""

from __future__ import annotations

import sys

import typer

from ftagent.cli import benchmarks, config, datasets, env, export, job, mcp, models, prompts, run, status, ui
from ftagent.cli.common import print_error
from ftagent.cli.doctor import doctor
from ftagent.cli.eval import eval_model
from ftagent.cli.help import CONTEXT_SETTINGS, tidy_help

app = typer.Typer(
    name="ftagent",
    help="Autonomous, benchmark-driven LLM fine-tuning: propose → code → validate → train → evaluate → feedback.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings=CONTEXT_SETTINGS,
)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"ftagent {version('ftagent')}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                 help="print ftagent's version (from the installed package) and exit"),
) -> None:
    """Autonomous, benchmark-driven LLM fine-tuning: propose → code → validate → train → evaluate → feedback."""


app.command("llm_finetune")(run.llm_finetune)
app.command("demo")(run.demo)
app.command("plan")(run.plan)
app.command("report")(run.report)
app.command("status")(status.status)
app.command("doctor")(doctor)
app.command("ui")(ui.ui)
app.add_typer(benchmarks.app, name="benchmarks")
app.add_typer(config.app, name="config")
app.add_typer(datasets.app, name="datasets")
app.add_typer(env.app, name="env")
app.add_typer(models.app, name="models")
app.add_typer(job.app, name="job")
app.command("prompts")(prompts.prompts)
app.command("export")(export.export)
app.command("eval")(eval_model)
app.command("mcp")(mcp.mcp)
tidy_help(app)


def main() -> None:
    """Console-script entry point: user errors exit 2 with one clear message, a broken environment 1
    (:func:`ftagent.core.errors.exit_message`, the MCP server's tool errors use the same words)."""
    from ftagent.cli.interrupt import freeze_at_exit, honour_ctrl_c
    from ftagent.core.errors import exit_message

    honour_ctrl_c()  # Ctrl-C ends every command at once, whoever started it (issue 43)
    freeze_at_exit()
    try:
        app()
    except Exception as exc:
        known = exit_message(exc)
        if known is None:
            raise
        print_error(known[0])
        sys.exit(known[1])
