"""`ftagent llm_finetune`, `ftagent demo` and `ftagent report`: run, demo and report a session."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ftagent.cli.common import fail, prepare_env

if TYPE_CHECKING:
    from ftagent.finetune.app import FinetuneOptions


def llm_finetune(
    benchmark: str | None = typer.Option(None, "--benchmark", help="benchmark key (e.g. aime25) or a benchmark YAML file (./my_bench.yaml)"),
    benchmark_description: str | None = typer.Option(
        None, "--benchmark-description", help="free text; default: the benchmark's description"),
    base_model: str | None = typer.Option(
        None, "--base-model", help="HF repo id (Qwen/Qwen2.5-7B-Instruct), local folder or builtin/<name>"),
    dataset: str | None = typer.Option(None, "--dataset", help="raw dataset name, 'all', or your own file (./my_data.jsonl|.json|.csv|.parquet, Alpaca or ShareGPT)"),
    upper_data_size_limit: int | None = typer.Option(None, "--upper-data-size-limit", min=1),
    loop_n: int | None = typer.Option(None, "--loop-n", min=1, help="total loops in the session"),
    step_n: int | None = typer.Option(None, "--step-n", min=1, help="steps to run in this invocation"),
    timeout: str | None = typer.Option(None, "--timeout", help="wall-clock budget: 12h, 90m, 1h30m, 45s"),
    path: Path | None = typer.Option(None, "--path", help="resume from a snapshot file or session dir"),
    checkout: bool = typer.Option(True, "--checkout/--no-checkout", "-c/-C",
                                  help="resume in place (drop later snapshots) or fork a new session"),
    user_target_scenario: str | None = typer.Option(
        None, "--user-target-scenario", help="free-text goal carried into every prompt"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no live progress (the report is still printed)"),
    plan_only: bool = typer.Option(False, "--plan", help="print the forecast (as `ftagent plan`) and exit: no session, nothing trained"),
) -> None:
    """Run the fine-tuning loop for a benchmark and a base model (or resume one)."""
    from ftagent.finetune.app import FinetuneOptions, run_finetune

    if plan_only and path is not None:
        fail("--plan forecasts a new session; a resume (--path) has its forecast in `ftagent report`")
    prepare_env()
    options = FinetuneOptions(
        benchmark=benchmark, benchmark_description=benchmark_description, base_model=base_model,
        dataset=dataset, upper_data_size_limit=upper_data_size_limit, loop_n=loop_n, step_n=step_n,
        timeout=timeout, path=path, checkout=checkout, user_target_scenario=user_target_scenario,
        quiet=plan_only or quiet,
    )
    if plan_only:
        _print_forecast(options)
        return
    summary = run_finetune(options)
    if summary.status == "env_error":
        raise typer.Exit(1)


def plan(
    benchmark: str | None = typer.Option(None, "--benchmark", help="benchmark key or a benchmark YAML file"),
    benchmark_description: str | None = typer.Option(None, "--benchmark-description"),
    base_model: str | None = typer.Option(None, "--base-model", help="HF repo id, local folder or builtin/<name>"),
    dataset: str | None = typer.Option(None, "--dataset", help="raw dataset name, 'all', or your own file"),
    upper_data_size_limit: int | None = typer.Option(None, "--upper-data-size-limit", min=1),
    loop_n: int | None = typer.Option(None, "--loop-n", min=1, help="total loops in the session"),
    timeout: str | None = typer.Option(None, "--timeout", help="wall-clock budget: 12h, 90m, 1h30m, 45s"),
    user_target_scenario: str | None = typer.Option(None, "--user-target-scenario"),
) -> None:
    """Forecast a session (llm_finetune's options) without running it: time per loop, memory, LLM use, fit."""
    from ftagent.finetune.app import FinetuneOptions

    prepare_env()
    _print_forecast(FinetuneOptions(
        benchmark=benchmark, benchmark_description=benchmark_description, base_model=base_model,
        dataset=dataset, upper_data_size_limit=upper_data_size_limit, loop_n=loop_n, timeout=timeout,
        user_target_scenario=user_target_scenario, quiet=True,
    ))


def _print_forecast(options: FinetuneOptions) -> None:
    """Measure (or read the cached probes) and print the forecast of a session with these options."""
    from rich.console import Console

    from ftagent.finetune.plan import plan_finetune
    from ftagent.views.forecast import print_forecast

    print_forecast(plan_finetune(options), Console(width=140))


def demo(
    loop_n: int = typer.Option(3, "--loop-n", min=1),
    timeout: str | None = typer.Option(None, "--timeout"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no live progress (the report is still printed)"),
) -> None:
    """Offline demo: tiny model, demo_add benchmark, local runner, heuristic planner (or LLM if set)."""
    from ftagent.finetune.app import run_demo

    prepare_env()
    run_demo(loop_n=loop_n, timeout=timeout, quiet=quiet)


def report(session: Path = typer.Argument(..., help="session directory")) -> None:
    """Write and print report.md / report.json for a session."""
    from ftagent.views.report import write_report

    if not (session / "events.jsonl").exists():
        fail(f"{session} is not a session directory (no events.jsonl)")
    md, _ = write_report(session)
    typer.echo(md.read_text(encoding="utf-8"))
