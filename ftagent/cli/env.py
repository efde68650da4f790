"""`ftagent env ...` commands: create and check the shared tool env."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ftagent.cli.common import prepare_env

if TYPE_CHECKING:
    from rich.console import Console
    from rich.status import Status


def _shown(status: Status, console: Console, *, escaped: bool = False) -> Callable[[str], None]:
    """A progress callback: the spinner's text and a log line (``escaped``: build output, not rich markup)."""
    def show(msg: str) -> None:
        if escaped:
            from rich.markup import escape

            msg = escape(msg)
        status.update(msg)
        console.log(msg)
    return show

app = typer.Typer(help="Create and check the tool environments (LLaMA-Factory, OpenCompass).", no_args_is_help=True)


def _env_path(path: Path | None) -> Path:
    from ftagent.core.settings import load_settings
    from ftagent.runners.toolenv import tools_env_path

    return path.absolute() if path else tools_env_path(load_settings())


@app.command("setup")
def env_setup(
    path: Path | None = typer.Option(None, "--path", help="default: FT_TOOLS_ENV or FT_FILE_PATH/envs/tools"),
    gpu: bool | None = typer.Option(None, "--gpu/--cpu", help="torch flavour; default: detect with NVML"),
    force: bool = typer.Option(False, "--force", help="reinstall even when the env is up to date"),
    vllm: bool = typer.Option(True, "--vllm/--no-vllm",
                              help="with --gpu: also the vLLM eval env (FT_VLLM_ENV or FT_FILE_PATH/envs/vllm)"),
) -> None:
    """Create the tool env (torch, LLaMA-Factory, OpenCompass, peft; on GPU also DeepSpeed, bitsandbytes
    and the separate vLLM eval env), or confirm they are up to date."""
    from rich.console import Console

    from ftagent.core.hardware import detect_gpus
    from ftagent.runners.toolenv import setup_tools_env

    prepare_env()
    target = _env_path(path)
    use_gpu = detect_gpus().gpu_count > 0 if gpu is None else gpu
    console = Console(stderr=True)
    _reap_and_record(console)
    with console.status(f"tool env {target} ({'GPU' if use_gpu else 'CPU'})") as status:
        result = setup_tools_env(target, use_gpu, force=force,
                                 progress=_shown(status, console))
    verb = "up to date" if result.skipped else f"ready in {result.duration_s:.0f}s"
    typer.echo(f"tool env {target}: {verb}")
    typer.echo(", ".join(f"{k} {v}" for k, v in result.report.versions.items()))
    if use_gpu and vllm:
        _setup_vllm(console, force)


def _reap_and_record(console) -> None:
    """Record every pip this command starts in FT_FILE_PATH's child registry, after ending what a killed
    predecessor left there (a pip whose ``env setup`` and supervisor were both killed)."""
    from ftagent.core.settings import load_settings
    from ftagent.runners import reaper

    directory = reaper.registry_dir(load_settings().ft.file_path)
    reaper.activate(directory)
    reaped = reaper.reap_leftovers(directory)
    if not reaped.empty:
        console.log(reaped.summary())


def _setup_vllm(console, force: bool) -> None:
    from ftagent.core.settings import load_settings
    from ftagent.runners.vllmenv import setup_vllm_env, vllm_env_path

    target = vllm_env_path(load_settings())
    with console.status(f"vLLM env {target}") as status:
        skipped, report = setup_vllm_env(target, force=force,
                                         progress=_shown(status, console))
    typer.echo(f"vLLM env {target}: {'up to date' if skipped else 'ready'}")
    typer.echo(", ".join(f"{k} {v}" for k, v in report.versions.items()))


@app.command("check")
def env_check(
    path: Path | None = typer.Option(None, "--path", help="default: FT_TOOLS_ENV or FT_FILE_PATH/envs/tools"),
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
) -> None:
    """Import the tools in the env and report versions; exit 1 when something is wrong."""
    from ftagent.runners.toolenv import check_tools_env

    prepare_env()
    report = check_tools_env(_env_path(path))
    if as_json:
        typer.echo(report.model_dump_json(indent=2))
    else:
        typer.echo(f"tool env {report.path}: {'ok' if report.ok else 'NOT OK'}")
        for name, version in report.versions.items():
            typer.echo(f"  {name:13s} {version}")
        if not report.marker_current and report.exists:
            typer.echo("  (no setup marker for the current configs/envs files: created elsewhere, or the "
                       "requirement files changed; `ftagent env setup` would reinstall)")
        if report.cuda is not None:
            typer.echo(f"  {'cuda':13s} {report.cuda.summary}")
            for note in report.cuda.notes:
                typer.echo(f"  note: {note}")
        for err in report.problems():
            typer.secho(f"  error: {err}", fg=typer.colors.RED)
    if not report.ok:
        raise typer.Exit(1)


@app.command("build-images")
def env_build_images(
    base_image: str | None = typer.Option(None, "--base-image", help="default: FT_DOCKER_BASE_IMAGE, else "
                                          "ftagent-base:bookworm when built, else python:3.11-slim-bookworm"),
    gpu: bool | None = typer.Option(None, "--gpu/--cpu", help="torch flavour; default: detect with NVML"),
    force: bool = typer.Option(False, "--force", help="build even when the tag exists (layer cache applies)"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="show only the steps, not the build log"),
) -> None:
    """Build the docker tool image (content-hashed tag; an unchanged Dockerfile is not rebuilt)."""
    from rich.console import Console
    from rich.markup import escape

    from ftagent.core.hardware import detect_gpus
    from ftagent.core.settings import load_settings
    from ftagent.runners.docker import connect
    from ftagent.runners.images import ImageBuildError, build_image, spec_from_settings

    prepare_env()
    settings = load_settings()
    client = connect()
    use_gpu = detect_gpus().gpu_count > 0 if gpu is None else gpu
    spec = spec_from_settings(settings, flavour="gpu" if use_gpu else "cpu", base_image=base_image, client=client)
    from ftagent.core.paths import docker_logs_dir

    log_file = docker_logs_dir(settings.ft.file_path) / f"build-{spec.tag.replace(':', '-')}.log"
    console = Console(stderr=True)
    console.print(f"image {spec.tag} from {spec.base_image} ({len(spec.wheels)} local wheel(s), "
                  f"CA bundle: {spec.ca_bundle or 'none'}); log: {log_file}", soft_wrap=True)
    with console.status(f"building {spec.tag}") as status:
        def on_step(step) -> None:
            status.update(f"step {step.number}/{step.total}: {escape(step.instruction[:90])}")
            if quiet:
                console.print(f"[bold]step {step.number}/{step.total}[/bold] {escape(step.instruction[:150])}",
                              soft_wrap=True)

        def on_line(line: str) -> None:
            if not quiet:
                console.print(escape(line), style="dim", highlight=False, soft_wrap=True)

        try:
            result = build_image(client, spec, force=force, network_mode=settings.ft.docker_build_network,
                                 log_file=log_file, on_line=None if quiet else on_line, on_step=on_step,
                                 on_heartbeat=_shown(status, console, escaped=True))
        except ImageBuildError as exc:
            typer.secho(str(exc), fg=typer.colors.RED, err=True)
            raise typer.Exit(1) from exc
    verb = "up to date" if result.skipped else f"built in {result.duration_s:.0f}s"
    typer.echo(f"{result.tag} ({spec.alias}): {verb}, {result.size_bytes / 1e9:.2f} GB")
