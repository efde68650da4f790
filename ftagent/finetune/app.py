"""Application layer behind ``ftagent llm_finetune`` and ``ftagent demo``.

Validates the user's options (one clear message, exit code 2, nothing written before validation
passes), builds or resumes a session, initialises the scenario, and runs the loop engine.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel
from rich.console import Console

from ftagent.core.durations import parse_duration
from ftagent.core.errors import UserInputError
from ftagent.core.paths import configs_dir
from ftagent.engine.loop import RunSummary

CONFIGS = configs_dir()
console = Console(stderr=True)


class FinetuneOptions(BaseModel):
    """The user's choices for one ``llm_finetune`` invocation (CLI flags or the demo)."""

    benchmark: str | None = None
    benchmark_description: str | None = None
    base_model: str | None = None
    dataset: str | None = None
    upper_data_size_limit: int | None = None
    loop_n: int | None = None
    step_n: int | None = None
    timeout: str | None = None
    path: Path | None = None
    checkout: bool = True
    user_target_scenario: str | None = None


@lru_cache(maxsize=1)
def scenario_descriptions() -> dict[str, dict]:
    """Benchmark descriptions from ``configs/scenarios.json`` (key -> entry)."""
    data = json.loads((CONFIGS / "scenarios.json").read_text(encoding="utf-8"))
    return {k: v for k, v in data.items() if not k.startswith("_")}


def default_description(benchmark: str) -> str:
    """The configured description of a benchmark, or '' when none is configured."""
    return scenario_descriptions().get(benchmark, {}).get("benchmark_description", "")


def check_benchmark(key: str) -> None:
    """Raise UserInputError for an unknown benchmark key (listing valid keys, suggesting the closest)."""
    from ftagent.benchmarks import get_benchmark

    get_benchmark(key)


def check_base_model(name: str | None, file_path: Path | None = None) -> None:
    """A base model must be given, and be builtin/<name>, a local folder or an HF repo id."""
    if not name or not name.strip():
        raise UserInputError(
            "no base model: pass --base-model (e.g. builtin/tiny-qwen2 or Qwen/Qwen2.5-7B-Instruct) "
            "or set FT_BASE_MODEL"
        )
    from ftagent.models.builtin import check_model_name

    check_model_name(name, file_path)


def run_finetune(options: FinetuneOptions) -> RunSummary:
    """Validate, then start or resume a session and run the loop. Returns the engine's summary.

    Raises:
        UserInputError: bad options (the CLI exits 2; nothing has been written).
        EnvironmentFailure: the environment cannot run a session (exit 1).
    """
    from ftagent.core.settings import load_settings
    from ftagent.engine.session import Session

    timeout_s = parse_duration(options.timeout) if options.timeout else None
    resumed = None
    if options.path is not None:
        resumed = Session.load(options.path)  # validates before anything is written
        config = resumed[0].state.config.get("run", {})
        benchmark = options.benchmark or config.get("benchmark")
        base_model = options.base_model or config.get("base_model")
    else:
        benchmark, base_model = options.benchmark, options.base_model
    settings = load_settings(
        target_benchmark=benchmark, base_model=base_model, dataset=options.dataset,
        upper_data_size_limit=options.upper_data_size_limit,
        user_target_scenario=options.user_target_scenario,
        benchmark_description=options.benchmark_description,
    )
    benchmark, base_model = settings.ft.target_benchmark, settings.ft.base_model
    if not benchmark:
        raise UserInputError(
            "no benchmark: pass --benchmark KEY (see `ftagent benchmarks list`). ftagent needs a benchmark "
            "to measure progress; --user-target-scenario only adds a free-text goal to the prompts"
        )
    check_benchmark(benchmark)
    check_base_model(base_model, settings.ft.file_path)
    if not settings.ft.benchmark_description:
        settings.ft.benchmark_description = default_description(benchmark)

    from ftagent.finetune.workflow import start_or_resume

    return start_or_resume(settings, resumed=resumed, checkout=options.checkout,
                           loop_n=options.loop_n, step_n=options.step_n, timeout_s=timeout_s)


def ensure_tools_env(settings) -> Path:
    """The tool env for the local runner, created with ``ftagent env setup`` logic when missing."""
    from ftagent.core.hardware import detect_gpus
    from ftagent.runners.toolenv import setup_tools_env, tools_env_path

    path = tools_env_path(settings)
    if all((path / "bin" / tool).exists() for tool in ("python", "llamafactory-cli", "opencompass")):
        return path
    console.print(f"[bold]ftagent[/bold]: creating the tool env at {path} (one time, a few minutes)")
    setup_tools_env(path, detect_gpus().gpu_count > 0, progress=lambda msg: console.print(f"  {msg}"))
    return path


def run_demo(loop_n: int = 3, timeout: str | None = None) -> RunSummary:
    """The embedded default: tiny model + demo_add + local runner + offline planner (or the LLM).

    The demo trains on up to 5000 generated rows (more than the default 2000 cap, because the tiny
    model has to learn addition from scratch, not a format).
    """
    import os

    os.environ.setdefault("FT_ENV_TYPE", "local")
    os.environ.setdefault("FT_UPPER_DATA_SIZE_LIMIT", "5000")
    from ftagent.core.settings import load_settings

    settings = load_settings()
    if settings.ft.env_type == "local":
        ensure_tools_env(settings)
    options = FinetuneOptions(benchmark="demo_add", base_model="builtin/tiny-qwen2", loop_n=loop_n,
                              timeout=timeout)
    summary = run_finetune(options)
    console.print(f"[bold]demo finished:[/bold] {summary.status} after {summary.loops_done} loop(s)")
    return summary
