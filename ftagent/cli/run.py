"""`ftagent llm_finetune`, `ftagent demo` and `ftagent report`: run, demo and report a session."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ftagent.cli.common import fail, prepare_env, print_error

NO_PROGRESS_EXIT = 3  # 2: bad input at start, 1: the environment stopped the session, 3: no loop could progress
NO_MODEL_EXIT = 4  # the session ended without one scored model (issue 43): never a success

if TYPE_CHECKING:
    from ftagent.finetune.app import FinetuneOptions

UPPER_HELP = "at most this many training samples per loop (default: FT_UPPER_DATA_SIZE_LIMIT)"


def option_key(param) -> str:
    """A run file's key for an option: its long name without ``--`` (``--base-model`` → ``base_model``)."""
    long = next((o for o in param.opts if o.startswith("--")), param.name)
    return long.removeprefix("--").replace("-", "_")


RUN_FILE = "ftagent.run_file"  # ctx.meta: the RunFile that --config read


def _read_run_file(ctx: typer.Context, _param, value: Path | None) -> Path | None:
    """``--config run.yaml``: the file's options become the defaults of this command, so flags override them; its
    settings reach the command through ``ctx.meta`` (:func:`file_settings`), below the environment.

    ``plan`` reads the same file as ``llm_finetune`` (a user plans, then runs, one run.yaml): the keys that say
    how a run is carried out (step_n, checkout, quiet, plan) have nothing to forecast and are skipped there;
    ``path`` (a resume) is refused, as ``llm_finetune --plan --path`` is.
    """
    if value is None or ctx.resilient_parsing:
        return value
    from ftagent.core.errors import UserInputError
    from ftagent.core.run_config import effective_options, load_run_file

    by_key = {option_key(p): p.name for p in ctx.command.params if p.name != "config"}
    run_file = load_run_file(value)
    values = effective_options(run_file)
    if "path" in values and "path" not in by_key:
        raise UserInputError(f"run file {value}: 'path' resumes a session; `ftagent {ctx.info_name}` forecasts a "
                             "new one (a resumed session's forecast is in `ftagent report`)")
    ctx.default_map = {**(ctx.default_map or {}), **{by_key[key]: v for key, v in values.items() if key in by_key}}
    ctx.meta[RUN_FILE] = run_file
    return value


def file_settings(ctx: typer.Context) -> dict:
    """The settings of the run file ``--config`` read (by settings name), ``{}`` without one."""
    run_file = ctx.meta.get(RUN_FILE)
    return dict(run_file.settings) if run_file is not None else {}


def config_option():
    """``--config run.yaml`` (core/run_config.py owns the file's format)."""
    return typer.Option(None, "--config", is_eager=True, callback=_read_run_file,
                        help="a run file: YAML of these options and any setting by name (base_model: ..., loop_n: 3, "
                             "planner: heuristic); flags and the environment override it")


def llm_finetune(
    ctx: typer.Context,
    config: Path | None = config_option(),
    benchmark: str | None = typer.Option(None, "--benchmark", help="benchmark key (e.g. aime25) or a benchmark YAML file (./my_bench.yaml)"),
    benchmark_description: str | None = typer.Option(
        None, "--benchmark-description", help="free text; default: the benchmark's description"),
    base_model: str | None = typer.Option(
        None, "--base-model", help="HF repo id (Qwen/Qwen2.5-7B-Instruct), local folder or builtin/<name>"),
    dataset: str | None = typer.Option(None, "--dataset", help="raw dataset name, 'all', or your own file (./my_data.jsonl|.json|.csv|.parquet, Alpaca or ShareGPT)"),
    upper_data_size_limit: int | None = typer.Option(None, "--upper-data-size-limit", min=1, help=UPPER_HELP),
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
        quiet=plan_only or quiet, settings=file_settings(ctx),
    )
    if plan_only:
        _print_forecast(options)
        return
    from ftagent.finetune.lifecycle import interrupt_exit_code

    try:
        summary = run_finetune(options)
    except KeyboardInterrupt:  # during the start-up or the baseline (the session, if any, is ended)
        raise typer.Exit(interrupt_exit_code()) from None
    exit_for(summary)
    if path is not None and summary.steps_run == 0 and summary.status == "completed":
        # a resume of a finished session reprints its report: say that nothing ran (quickstart's resume)
        typer.echo(f"nothing left to run: the session had finished its {summary.loops_done} loop(s); the report "
                   "above is its last one (more loops: --loop-n N with a larger N; a step again: --path "
                   "SESSION/__session__/<loop>/<step> --no-checkout)", err=True)


def plan(
    ctx: typer.Context,
    config: Path | None = config_option(),
    benchmark: str | None = typer.Option(None, "--benchmark", help="benchmark key or a benchmark YAML file"),
    benchmark_description: str | None = typer.Option(
        None, "--benchmark-description", help="free text; default: the benchmark's description"),
    base_model: str | None = typer.Option(None, "--base-model", help="HF repo id, local folder or builtin/<name>"),
    dataset: str | None = typer.Option(None, "--dataset", help="raw dataset name, 'all', or your own file"),
    upper_data_size_limit: int | None = typer.Option(None, "--upper-data-size-limit", min=1, help=UPPER_HELP),
    loop_n: int | None = typer.Option(None, "--loop-n", min=1, help="total loops in the session"),
    timeout: str | None = typer.Option(None, "--timeout", help="wall-clock budget: 12h, 90m, 1h30m, 45s"),
    user_target_scenario: str | None = typer.Option(
        None, "--user-target-scenario", help="free-text goal carried into every prompt"),
    hardware: str | None = typer.Option(
        None, "--hardware", help="plan for GPUs described, not detected: 8xH100, 1xA10G, 4xA100-40GB, 8x80GB "
                                 "(no GPU, no baseline, no training probe; --base-model may hold only config.json)"),
    json_out: bool = typer.Option(False, "--json", help="the forecast (with --hardware: the launch plan) as JSON"),
    ram: float | None = typer.Option(
        None, "--ram", help="with --hardware: the host's RAM in GB, for ZeRO-3 CPU offload (unknown: not considered)"),
    train_config: Path | None = typer.Option(
        None, "--train-config", help="with --hardware: check a train.yaml as the validator does (exit 2 when "
                                     "upstream would refuse it)"),
) -> None:
    """Forecast a session (llm_finetune's options) without running it: time per loop, memory, LLM use, fit."""
    from ftagent.finetune.app import FinetuneOptions

    prepare_env()
    if hardware is not None:
        _print_launch_plan(base_model, hardware, benchmark=benchmark, as_json=json_out, ram_gb=ram,
                           train_config=train_config, file_settings=file_settings(ctx))
        return
    if ram is not None or train_config is not None:
        fail("--ram and --train-config go with --hardware (the launch plan)")
    _print_forecast(FinetuneOptions(
        benchmark=benchmark, benchmark_description=benchmark_description, base_model=base_model,
        dataset=dataset, upper_data_size_limit=upper_data_size_limit, loop_n=loop_n, timeout=timeout,
        user_target_scenario=user_target_scenario, quiet=True, settings=file_settings(ctx),
    ), as_json=json_out)


def _print_forecast(options: FinetuneOptions, as_json: bool = False) -> None:
    """Measure (or read the cached probes) and print the forecast of a session with these options."""
    from rich.console import Console

    from ftagent.finetune.plan import plan_finetune
    from ftagent.views.forecast_text import print_forecast
    from ftagent.views.heartbeat import Heartbeat

    status = Console(stderr=True, width=140)  # progress on stderr: stdout holds only the forecast
    with Heartbeat(lambda text: status.print(text, markup=False, highlight=False, soft_wrap=True)) as beat:
        forecast = plan_finetune(options, progress=beat.stage)
    if as_json:  # the MCP server's plan tool returns the same object
        typer.echo(forecast.model_dump_json(indent=1))
        return
    print_forecast(forecast, Console(width=140))


def _print_launch_plan(base_model: str | None, hardware: str, *, benchmark: str | None, as_json: bool,
                       ram_gb: float | None, train_config: Path | None, file_settings: dict) -> None:
    """``ftagent plan --hardware``: the launch plan and its preflight verdicts (text or JSON), and with
    ``--train-config`` the verdicts on that train.yaml."""
    import json

    from ftagent.core.settings import load_settings
    from ftagent.finetune.plan import check_train_config, hardware_slots, plan_hardware
    from ftagent.tools.launch.slots import slot_lines

    plan = plan_hardware(base_model, hardware, benchmark=benchmark, ram_gb=ram_gb, file_settings=file_settings)
    verdicts = check_train_config(plan, train_config) if train_config is not None else []
    slots = hardware_slots(plan, base_model or "", load_settings().ft.parallel_trials)  # FT_PARALLEL_TRIALS
    refused = bool(plan.refused) or any(v.status == "refused" for v in verdicts) or "refused" in slots["requested"]
    if as_json:
        out = {**json.loads(plan.model_dump_json(exclude={"memory"})), "slots": slots}
        if train_config is not None:
            out["train_config"] = [v.model_dump() for v in verdicts]
        typer.echo(json.dumps(out, indent=1))
        if refused:  # printed in full, and the exit status says upstream would refuse it
            raise typer.Exit(2)
        return
    cc = ".".join(map(str, plan.compute_capability)) if plan.compute_capability else "-"
    rows = [("hardware", f"{plan.hardware.spec}: {plan.gpu_count} x {plan.per_gpu_memory_gb:.2f} GB, compute "
                         f"capability {cc}"),
            ("model", f"{plan.model}: {plan.params_b:g}B parameters, context {plan.model_context_len}"),
            ("training", f"finetuning_type {plan.finetuning_type}" + (" + quantization_bit 4" if plan.quantization_bit
                         else "") + f", {plan.precision}, deepspeed {plan.deepspeed or 'none'}"),
            ("memory", f"{plan.static_gb_per_gpu:g} GB static per GPU; cutoff_len up to {plan.max_cutoff_len:,}"),
            ("host RAM", f"{plan.cpu_ram_gb:g} GB" if plan.cpu_ram_gb is not None else "unknown (--ram GB)"),
            ("evaluation", f"vLLM tensor_parallel_size {plan.tensor_parallel_size} x data parallel "
                           f"{plan.data_parallel_size}, max_model_len {plan.max_model_len}, dtype {plan.vllm_dtype}, "
                           f"max_lora_rank {plan.max_lora_rank}"),
            ("disk per loop", f"{plan.disk_per_loop_gb:g} GB")]
    for key, value in rows:
        typer.echo(f"{key:>14}: {value}")
    for note in plan.notes:
        typer.echo(f"{'note':>14}: {note}")
    typer.echo("slots:")
    for line in slot_lines(slots):
        typer.echo(f"  {line}")
    typer.echo("preflight:")
    for v in plan.preflight:
        typer.echo(f"  [{v.status}] {v.setting}: {v.message} ({v.source})")
    if train_config is not None:
        typer.echo(f"train.yaml {train_config}:")
        for v in verdicts:
            typer.echo(f"  [{v.status}] {v.setting}: {v.message} ({v.source})")
    if refused:
        raise typer.Exit(2)


def demo(
    loop_n: int = typer.Option(3, "--loop-n", min=1, help="total loops in the demo session"),
    timeout: str | None = typer.Option(None, "--timeout", help="wall-clock budget: 12h, 90m, 1h30m, 45s (default: none)"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no live progress (the report is still printed)"),
) -> None:
    """Offline demo: tiny model, demo_add benchmark, local runner, heuristic planner (or LLM if set)."""
    from ftagent.finetune.demo import run_demo

    prepare_env()
    from ftagent.finetune.lifecycle import interrupt_exit_code

    try:
        summary = run_demo(loop_n=loop_n, timeout=timeout, quiet=quiet)
    except KeyboardInterrupt:
        raise typer.Exit(interrupt_exit_code()) from None
    exit_for(summary)


def exit_for(summary) -> None:
    """The exit code of a session's ending (docs/reliability.md, "Exit codes"): 0 for a session that has a
    scored model (``completed``, ``saturated``, ``timeout``, ``budget``) or paused (``step_limit``); else the error line and
    128 + signal (interrupted), 1 (env_error), 3 (no_progress), 4 (no_model)."""
    from ftagent.finetune.lifecycle import interrupt_exit_code

    if summary.status == "interrupted":  # 128 + signal, as shells report it: never 0 (issue 34.12)
        raise typer.Exit(interrupt_exit_code())
    codes = {"env_error": 1, "no_progress": NO_PROGRESS_EXIT, "no_model": NO_MODEL_EXIT}
    if summary.status in codes:  # the whole message: a full disk's advice is longer than a console line
        print_error(summary.message)
        raise typer.Exit(codes[summary.status])


def report(session: Path = typer.Argument(..., help="session directory"),
           as_json: bool = typer.Option(False, "--json", help="print report.json (scores, intervals, SOTA, costs)")) -> None:
    """Write and print report.md / report.json for a session."""
    from ftagent.views.report import write_report

    if not (session / "events.jsonl").exists():
        fail(f"{session} is not a session directory (no events.jsonl)")
    md, js = write_report(session)
    typer.echo((js if as_json else md).read_text(encoding="utf-8"))
