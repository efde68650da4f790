"""``ftagent demo``: the embedded default session (tiny model, demo_add, local runner), its tool env made
when missing."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ftagent.finetune.app import FinetuneOptions, console, run_finetune

if TYPE_CHECKING:
    from ftagent.core.settings import Settings
    from ftagent.engine.loop import RunSummary


def ensure_tools_env(settings: Settings) -> Path:
    """The tool env for the local runner, created with ``ftagent env setup`` logic when missing."""
    from ftagent.core.hardware import detect_gpus
    from ftagent.runners.toolenv import setup_tools_env, tools_env_path

    path = tools_env_path(settings)
    if all((path / "bin" / tool).exists() for tool in ("python", "llamafactory-cli", "opencompass")):
        return path
    console.print(f"[bold]ftagent[/bold]: creating the tool env at {path} (one time, a few minutes)")
    setup_tools_env(path, detect_gpus().gpu_count > 0, progress=lambda msg: console.print(f"  {msg}"))
    return path


def run_demo(loop_n: int = 3, timeout: str | None = None, quiet: bool = False) -> RunSummary:
    """The embedded default: tiny model + demo_add + local runner + offline planner (or the LLM).

    The demo trains on up to 5000 generated rows (more than the default 2000 cap, because the tiny
    model has to learn addition from scratch, not a format).
    """
    import os

    os.environ.setdefault("FT_ENV_TYPE", "local")
    os.environ.setdefault("FT_UPPER_DATA_SIZE_LIMIT", "5000")
    from ftagent.core.settings import load_settings

    settings = load_settings()
    from ftagent.runners.base import capabilities
    from ftagent.runners.factory import runner_class

    if capabilities(runner_class(settings.ft.env_type)).uses_tools_env:
        ensure_tools_env(settings)
    options = FinetuneOptions(benchmark="demo_add", base_model="builtin/tiny-qwen2", loop_n=loop_n,
                              timeout=timeout, quiet=quiet)
    summary = run_finetune(options)
    console.print(f"[bold]demo finished:[/bold] {summary.status} after {summary.loops_done} loop(s)")
    return summary
