"""The ``ftagent`` command line (Typer).

Start-up must stay fast: this module imports nothing heavy (no litellm, torch, datasets, streamlit);
every command imports what it needs inside its body. ``tests/unit/test_cli.py`` checks it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from ftagent.errors import EnvironmentFailure, UserInputError

app = typer.Typer(
    name="ftagent",
    help="Autonomous, benchmark-driven LLM fine-tuning: propose → code → validate → train → evaluate → feedback.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
benchmarks_app = typer.Typer(help="List and inspect benchmark adapters.", no_args_is_help=True)
datasets_app = typer.Typer(help="List, prepare and inspect raw training datasets.", no_args_is_help=True)
env_app = typer.Typer(help="Create and check the tool environments (LLaMA-Factory, OpenCompass).",
                      no_args_is_help=True)
models_app = typer.Typer(help="Build and list base models (builtin/tiny-qwen2 ...).", no_args_is_help=True)
job_app = typer.Typer(help="Batch jobs over tasks.json.", no_args_is_help=True)
app.add_typer(benchmarks_app, name="benchmarks")
app.add_typer(datasets_app, name="datasets")
app.add_typer(env_app, name="env")
app.add_typer(models_app, name="models")
app.add_typer(job_app, name="job")


def _fail(message: str, code: int = 2) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)


def _prepare_env() -> None:
    """Validate and load ``./.env`` (malformed → exit 2) before any settings are read."""
    from ftagent.envfile import load_env_file

    load_env_file()


@app.command("llm_finetune")
def llm_finetune(
    benchmark: str | None = typer.Option(None, "--benchmark", help="benchmark key, e.g. aime25"),
    benchmark_description: str | None = typer.Option(
        None, "--benchmark-description", help="free text; default from configs/scenarios.json"),
    base_model: str | None = typer.Option(
        None, "--base-model", help="HF repo id (Qwen/Qwen2.5-7B-Instruct), local folder or builtin/<name>"),
    dataset: str | None = typer.Option(None, "--dataset", help="raw dataset name, or 'all'"),
    upper_data_size_limit: int | None = typer.Option(None, "--upper-data-size-limit", min=1),
    loop_n: int | None = typer.Option(None, "--loop-n", min=1, help="total loops in the session"),
    step_n: int | None = typer.Option(None, "--step-n", min=1, help="steps to run in this invocation"),
    timeout: str | None = typer.Option(None, "--timeout", help="wall-clock budget: 12h, 90m, 1h30m, 45s"),
    path: Path | None = typer.Option(None, "--path", help="resume from a snapshot file or session dir"),
    checkout: bool = typer.Option(True, "--checkout/--no-checkout", "-c/-C",
                                  help="resume in place (drop later snapshots) or fork a new session"),
    user_target_scenario: str | None = typer.Option(
        None, "--user-target-scenario", help="free-text goal carried into every prompt"),
) -> None:
    """Run the fine-tuning loop for a benchmark and a base model (or resume one)."""
    from ftagent.app import FinetuneOptions, run_finetune

    _prepare_env()
    options = FinetuneOptions(
        benchmark=benchmark, benchmark_description=benchmark_description, base_model=base_model,
        dataset=dataset, upper_data_size_limit=upper_data_size_limit, loop_n=loop_n, step_n=step_n,
        timeout=timeout, path=path, checkout=checkout, user_target_scenario=user_target_scenario,
    )
    summary = run_finetune(options)
    if summary.status == "env_error":
        raise typer.Exit(1)


@app.command("demo")
def demo(
    loop_n: int = typer.Option(3, "--loop-n", min=1),
    timeout: str | None = typer.Option(None, "--timeout"),
) -> None:
    """Offline demo: tiny model, demo_add benchmark, local runner, heuristic planner (or LLM if set)."""
    from ftagent.app import run_demo

    _prepare_env()
    run_demo(loop_n=loop_n, timeout=timeout)


@app.command("report")
def report(session: Path = typer.Argument(..., help="session directory")) -> None:
    """Write and print report.md / report.json for a session."""
    from ftagent.report import write_report

    if not (session / "events.jsonl").exists():
        _fail(f"{session} is not a session directory (no events.jsonl)")
    md, _ = write_report(session)
    typer.echo(md.read_text(encoding="utf-8"))


@benchmarks_app.command("list")
def benchmarks_list() -> None:
    """List benchmark keys with their category and core metric."""
    from ftagent.benchmarks import describe_all

    for row in describe_all():
        typer.echo(row)


@benchmarks_app.command("show")
def benchmarks_show(key: str) -> None:
    """Show one benchmark adapter in detail."""
    from ftagent.benchmarks import describe

    typer.echo(describe(key))


@app.command("doctor")
def doctor() -> None:
    """Report what this machine offers: GPUs, Docker, bubblewrap, tool envs, LLM settings."""
    from ftagent.doctor import run_doctor

    _prepare_env()
    run_doctor()


@app.command("ui")
def ui(
    log_dir: Path = typer.Option(Path("log"), "--log-dir", help="folder with sessions or jobs"),
    port: int = typer.Option(19899, "--port"),
    host: str = typer.Option("127.0.0.1", "--host"),
) -> None:
    """Start the Streamlit UI over a log directory."""
    from ftagent.ui.launch import launch

    raise typer.Exit(launch(log_dir, host=host, port=port))


def main() -> None:
    """Console-script entry point: user errors exit 2 with one clear message."""
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    try:
        app()
    except UserInputError as exc:
        _print_error(str(exc))
        sys.exit(2)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or exc.title
        _print_error(f"invalid setting {where}: {first['msg']}")
        sys.exit(2)
    except SettingsError as exc:
        cause = f": {exc.__cause__}" if exc.__cause__ else ""
        _print_error(f"invalid setting ({exc}){cause}")
        sys.exit(2)
    except EnvironmentFailure as exc:
        _print_error(str(exc))
        sys.exit(1)


def _print_error(message: str) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)


# Command groups live in ftagent/commands/ (one light module each; heavy imports stay inside commands).
from ftagent import commands  # noqa: E402,F401
