"""The root ``ftagent`` command: it only assembles the command groups (each module owns its app).

Start-up must stay fast: no module here imports anything heavy (no litellm, torch, datasets,
streamlit) at import time; every command imports what it needs inside its body.
``tests/unit/test_cli.py`` checks it.
"""

from __future__ import annotations

import sys

import typer

from ftagent.cli import benchmarks, datasets, env, export, job, models, prompts, run, ui
from ftagent.cli.common import print_error
from ftagent.cli.doctor import doctor
from ftagent.cli.eval import eval_model
from ftagent.cli.help import CONTEXT_SETTINGS, tidy_help
from ftagent.core.errors import EnvironmentFailure, StepError, UserInputError

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
app.command("doctor")(doctor)
app.command("ui")(ui.ui)
app.add_typer(benchmarks.app, name="benchmarks")
app.add_typer(datasets.app, name="datasets")
app.add_typer(env.app, name="env")
app.add_typer(models.app, name="models")
app.add_typer(job.app, name="job")
app.command("prompts")(prompts.prompts)
app.command("export")(export.export)
app.command("eval")(eval_model)
tidy_help(app)


def main() -> None:
    """Console-script entry point: user errors exit 2 with one clear message."""
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    try:
        app()
    except UserInputError as exc:
        print_error(str(exc))
        sys.exit(2)
    except ValidationError as exc:
        print_error(str(UserInputError.from_validation(exc, "invalid setting")))
        sys.exit(2)
    except SettingsError as exc:
        cause = f": {exc.__cause__}" if exc.__cause__ else ""
        print_error(f"invalid setting ({exc}){cause}")
        sys.exit(2)
    except EnvironmentFailure as exc:
        print_error(str(exc))
        sys.exit(1)
    except StepError as exc:  # a tool run outside a session (`eval`, `export`'s merge): one line, no traceback
        print_error(step_error_line(exc))
        sys.exit(1)


def step_error_line(exc: StepError) -> str:
    """A :class:`StepError` as the CLI's one error line: its type, message, suggestion and log file."""
    log = exc.details.get("log_file") if isinstance(exc.details, dict) else None
    text = f"[{exc.error_type.value}] {exc.message}" + (f"; {exc.suggestion}" if exc.suggestion else "") + (
        f" (log: {log})" if log else "")
    return " ".join(text.split())
