"""`ftagent job ...` commands."""

from __future__ import annotations

from pathlib import Path

import typer

from ftagent.cli.common import fail, prepare_env

app = typer.Typer(help="Batch jobs over tasks.json.", no_args_is_help=True)

_STYLE = {"green": "green", "red": "red", "blue": "blue", "": ""}


@app.command("status")
def status(job_dir: Path = typer.Argument(..., help="job folder (log/<job_id>), a folder of sessions or a session")) -> None:
    """Tasks × loops with validation / test core scores, baseline, best and task state."""
    from rich.console import Console
    from rich.table import Table

    from ftagent.ui import frames
    from ftagent.views.job import load_job
    from ftagent.views.layout import detect_layout

    layout = detect_layout(job_dir)
    if layout.kind == "missing":
        typer.secho(f"error: {job_dir} does not exist", fg=typer.colors.RED, err=True)
        raise typer.Exit(2)
    if layout.kind in ("empty", "jobs"):
        hint = f"; pick one of: {', '.join(Path(c).name for c in layout.children)}" if layout.children else ""
        typer.secho(f"error: {job_dir} holds no tasks or sessions{hint}", fg=typer.colors.RED, err=True)
        raise typer.Exit(2)
    job = load_job(job_dir)
    rows, colours = frames.summary_rows(job)
    table = Table(title=f"job {Path(job_dir).resolve().name}  (cells: validation / test)")
    for col in rows[0].keys() if rows else ["Task"]:
        table.add_column(col, no_wrap=col == "Task")
    for row, colour in zip(rows, colours, strict=True):
        cells = [f"[{_STYLE[colour[k]]}]{v}[/]" if colour.get(k) else str(v) for k, v in row.items()]
        table.add_row(*cells)
    console = Console(width=max(120, 24 + 14 * len(rows[0]) if rows else 120))
    console.print(table)
    stats = frames.job_stats(job)
    console.print("  ".join(f"{k}: {v}" for k, v in stats.items()))
    _print_run_states(console, job_dir)


def _print_run_states(console, job_dir: Path) -> None:
    """One line per task from ``.run/<task>.state.json`` (written by ``ftagent job run``)."""
    from ftagent.jobs.executors import read_state
    from ftagent.jobs.tasks import load_job_plan

    plan = load_job_plan(job_dir)
    states = [s for s in (read_state(job_dir, t.name) for t in (plan.tasks if plan else [])) if s]
    for st in states:
        rc = "" if st.exit_code is None else f" exit {st.exit_code}"
        where = f" on {st.node}" if st.node else ""
        console.print(f"{st.name}: {st.state}{rc} ({st.executor}, attempt {st.attempts}{where})")


def _default_bin() -> str:
    import os
    import shutil
    import sys

    explicit = os.environ.get("FTAGENT_BIN")
    if explicit:
        found = explicit if os.access(explicit, os.X_OK) else shutil.which(explicit)
        if not found:
            raise typer.BadParameter(f"FTAGENT_BIN={explicit} is not an executable")
        return str(Path(found).resolve())
    found = shutil.which("ftagent") or str(Path(sys.executable).with_name("ftagent"))
    return str(Path(found).resolve())


def _new_job_id(log_base: Path) -> str:
    from datetime import datetime

    base = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    job_id, n = base, 1
    while (log_base / job_id).exists():
        job_id, n = f"{base}_{n}", n + 1
    return job_id


@app.command("run")
def run(
    tasks_file: Path = typer.Argument(..., help="tasks.json (see job/README.md)"),
    executor: str = typer.Option("local", "--executor", help="local (this machine) or ray (a Ray cluster)"),
    address: str = typer.Option("auto", "--address", help="Ray cluster: auto, host:port or ray://host:10001"),
    job_id: str | None = typer.Option(None, "--job-id", help="default: date and time"),
    log_base: Path = typer.Option(None, "--log-base", envvar="FT_JOB_LOG_BASE", help="job root (default ./log)"),
    workspace_base: Path = typer.Option(None, "--workspace-base", envvar="FT_JOB_WORKSPACE_BASE",
                                        help="workspace root (default: WORKSPACE_PATH, as llm_finetune uses it)"),
    gpu_resource: str = typer.Option("GPU", "--gpu-resource", help="ray: resource reserved per listed GPU"),
    max_retries: int = typer.Option(3, "--max-retries", min=0, help="ray: retries when a node dies"),
    dry_run: bool = typer.Option(False, "--dry-run", help="validate and print the plan; start nothing"),
    json_out: bool = typer.Option(False, "--json", help="with --dry-run: the plan as JSON (job/run_ft_job.sh reads it)"),
) -> None:
    """Run every task of tasks.json to its end, locally or on a Ray cluster (blocks; Ctrl-C cancels)."""
    import re

    from ftagent.jobs import tasks as tasks_mod

    if executor not in ("local", "ray"):
        raise typer.BadParameter("use local or ray", param_hint="--executor")
    log_base = Path(log_base or "log")
    if workspace_base is None:  # the sessions' own WORKSPACE_PATH (environment or ./.env), not a second default
        from ftagent.core.settings import PathSettings

        prepare_env()
        workspace_base = PathSettings().workspace_path
    tasks, errors = tasks_mod.read_tasks_file(tasks_file)
    if tasks is None:
        for err in errors:
            typer.secho(f"error: {tasks_file}: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(2)
    from ftagent.finetune.start import resolve_tasks

    runs, errors = resolve_tasks(tasks.tasks)  # the start-up of llm_finetune, for every task, before any starts
    if errors:
        for err in errors:
            typer.secho(f"error: {tasks_file}: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(2)
    if job_id is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", job_id):
        fail(f"--job-id '{job_id}': use letters, digits, '_', '.', '-'")
    if job_id is not None and (log_base / job_id).exists():
        fail(f"job directory {log_base / job_id} already exists; choose another --job-id")
    plan = tasks_mod.build_plan(tasks, job_id=job_id or _new_job_id(log_base), log_base=log_base,
                                workspace_base=workspace_base, ftagent_bin=_default_bin(),
                                descriptions=[r.description for r in runs])
    if executor == "local":  # the tasks' GPUs are this machine's: say now what it cannot give
        _warn_gpus(plan)
    if dry_run:
        if json_out:
            typer.echo(plan.model_dump_json(indent=1))
        else:
            from ftagent.jobs.plan_text import describe_plan

            typer.echo("\n".join(describe_plan(plan, executor)))
        return
    runner = _executor(executor, address, gpu_resource, max_retries)
    typer.echo(f"job {plan.job_id}: {len(plan.tasks)} task(s), executor {executor}, dir {plan.job_dir}")
    try:
        results = runner.run(plan)
    except ValueError as exc:
        fail(str(exc))
    for name, rc in sorted(results.items()):
        typer.echo(f"  {name}: exit {rc}")
    raise typer.Exit(0 if results and all(rc == 0 for rc in results.values()) else 1)


def _warn_gpus(plan) -> None:
    from ftagent.core.hardware import detect_gpus
    from ftagent.jobs.plan_text import gpu_warnings

    if not any(task.spec.gpus for task in plan.tasks):
        return
    hardware = detect_gpus(None)  # every GPU of the machine: tasks.json's indices are the machine's
    for line in gpu_warnings(plan, hardware.gpu_count, hardware.message):
        typer.secho(f"warning: {line}", fg=typer.colors.YELLOW, err=True)


def _executor(kind: str, address: str, gpu_resource: str, max_retries: int):
    if kind == "local":
        from ftagent.jobs.executors import LocalExecutor

        return LocalExecutor()
    try:
        import ray  # noqa: F401
    except ImportError:
        fail("--executor ray needs Ray: pip install 'ftagent[ray]'", 1)
    from ftagent.jobs.ray_executor import RayExecutor

    return RayExecutor(address, gpu_resource=gpu_resource, max_retries=max_retries)


@app.command("cancel")
def cancel(
    job_dir: Path = typer.Argument(..., help="job folder (log/<job_id>)"),
    task: list[str] | None = typer.Option(None, "--task", help="task name (repeatable); default: all"),
) -> None:
    """Stop a job's tasks (both executors): running ones get SIGTERM, waiting ones never start."""
    from ftagent.jobs.executors import request_cancel

    if not (job_dir / "job.json").is_file():
        fail(f"{job_dir} is not a job folder (no job.json)")
    try:
        names = request_cancel(job_dir, task or None)
    except ValueError as exc:
        fail(str(exc))
    typer.echo(f"cancel requested for: {', '.join(names)}" if names else "nothing to cancel: all tasks ended")
