"""The MCP server's tools: each calls the function its CLI command calls (one code path) and returns its typed
result as JSON; a bad input is a tool error with the CLI's one-line message (:func:`failure`).

Blocking tools (plan, eval, export, status ...) are plain functions: the SDK runs them in a worker thread. The
tools that start or signal runs are coroutines on the event loop (:mod:`ftagent.mcp_server.runs`).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, cast

import anyio.from_thread
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel, Field

from ftagent.benchmarks.base import BenchmarkSpec
from ftagent.core.errors import UserInputError, exit_message
from ftagent.core.forecast_arithmetic import Forecast
from ftagent.datasets.listing import DatasetRow
from ftagent.finetune.export.bundle import ExportResult
from ftagent.finetune.score import EvalReport
from ftagent.mcp_server.runs import RunManager, StartResult
from ftagent.tools.launch.plan import LaunchPlan
from ftagent.views.lookup import SessionSummary
from ftagent.views.report import Report
from ftagent.views.status import SessionStatus

F = TypeVar("F", bound=Callable[..., Any])

Session = Annotated[str, Field(description="a session folder, or its id under the server's LOG_PATH")]
Config = Annotated[str | None, Field(description="a run file (YAML: llm_finetune's options and any setting by name, "
                                                 "docs/configuration.md); the options below override it")]
Benchmark = Annotated[str | None, Field(description="benchmark key (demo_add, gsm8k ...) or a benchmark YAML file")]
BaseModelName = Annotated[str | None, Field(description="HF repo id, local folder or builtin/<name>")]
Dataset = Annotated[str | None, Field(description="raw dataset name, 'all', or your own data file")]
LoopN = Annotated[int | None, Field(ge=1, description="total loops in the session")]
Timeout = Annotated[str | None, Field(description="wall-clock budget: 12h, 90m, 1h30m, 45s")]
Limit = Annotated[int | None, Field(ge=1, description="at most this many training samples per loop")]
Scenario = Annotated[str | None, Field(description="free-text goal carried into every prompt")]
Description = Annotated[str | None, Field(description="benchmark description (default: the benchmark's)")]
Detach = Annotated[bool | None, Field(description="true: the run goes on after this server exits (default: the "
                                                  "server's --detach)")]
WaitS = Annotated[float, Field(ge=0, le=600, description="seconds to wait for the run's session to exist")]


class PlanResult(BaseModel):
    """``plan``: the forecast measured on this machine, or (with ``hardware``) the launch plan for GPUs described."""

    forecast: Forecast | None = None
    launch_plan: LaunchPlan | None = None


class SessionList(BaseModel):
    log_path: str
    sessions: list[SessionSummary]


class BenchmarkList(BaseModel):
    benchmarks: list[BenchmarkSpec]


class DatasetList(BaseModel):
    datasets: list[DatasetRow]


class ModelRow(BaseModel):
    name: str
    status: str  # built | not built | local
    description: str


class ModelList(BaseModel):
    models: list[ModelRow]


def failure(exc: Exception) -> CallToolResult:
    """An error as the tool's result: the CLI's one-line message for ftagent's errors (exit 2 or 1 there); anything
    else named in one line, its traceback only in the server's log. The SDK would prefix its own words to a
    raised ToolError, so the result is built here: the text is exactly what the CLI prints after ``error:``."""
    known = exit_message(exc)
    if known is not None:
        text = known[0]
    else:
        logging.getLogger("ftagent.mcp").exception("tool failed")
        text = f"internal error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def tool(fn: F) -> F:
    """A tool method whose errors become :func:`failure` results (the signature is the SDK's input schema)."""
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            try:
                return await fn(*args, **kwargs)
            except Exception as exc:
                return failure(exc)

        return cast(F, run_async)

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            return failure(exc)

    return cast(F, run)


def _log_path() -> Path:
    from ftagent.core.settings import load_settings

    return Path(load_settings().paths.log_path)


def _session(session: str) -> Path:
    from ftagent.views.lookup import find_session

    return find_session(session, _log_path())


def _flags(**options: Any) -> list[str]:
    """``llm_finetune``'s flags for the options given (None: not given, the run file or the default decides)."""
    out: list[str] = []
    for name, value in options.items():
        if value is not None:
            out += [f"--{name.replace('_', '-')}", str(value)]
    return out


class FtagentTools:
    """The tools (registered on the server by :func:`ftagent.mcp_server.server.build_server`)."""

    def __init__(self, runs: RunManager) -> None:
        self.runs = runs

    @tool
    def plan(self, config: Config = None, benchmark: Benchmark = None, base_model: BaseModelName = None,
             dataset: Dataset = None, loop_n: LoopN = None, timeout: Timeout = None,
             upper_data_size_limit: Limit = None, user_target_scenario: Scenario = None,
             benchmark_description: Description = None,
             hardware: Annotated[str | None, Field(description="plan for GPUs described, not detected: 8xH100, "
                                                               "4xA100-40GB (no probe)")] = None,
             ctx: Context | None = None) -> PlanResult:
        """Forecast a run (a run file and/or options) without running it: time per loop from a real training probe
        and the baseline's evaluation, memory, LLM calls and price, whether it fits the timeout (`ftagent plan
        --json`). With `hardware`: the launch plan for those GPUs and its preflight. Takes minutes the first time
        (both measurements are cached); each stage is reported as progress when the client asks for it."""
        from ftagent.finetune.plan import plan_finetune, plan_hardware

        stage = iter(range(1, 1000))

        def progress(text: str) -> None:  # the CLI's heartbeat lines, as MCP progress (this runs in a worker thread)
            if ctx is not None:
                anyio.from_thread.run(functools.partial(ctx.report_progress, next(stage), None, text))

        options = _options(config, benchmark=benchmark, base_model=base_model, dataset=dataset, loop_n=loop_n,
                           timeout=timeout, upper_data_size_limit=upper_data_size_limit,
                           user_target_scenario=user_target_scenario, benchmark_description=benchmark_description)
        if hardware is not None:
            return PlanResult(launch_plan=plan_hardware(options.base_model, hardware, benchmark=options.benchmark,
                                                        file_settings=options.settings))
        return PlanResult(forecast=plan_finetune(options, progress=progress))

    @tool
    async def start(self, config: Config = None, benchmark: Benchmark = None, base_model: BaseModelName = None,
                    dataset: Dataset = None, loop_n: LoopN = None, timeout: Timeout = None,
                    upper_data_size_limit: Limit = None, user_target_scenario: Scenario = None,
                    benchmark_description: Description = None,
                    step_n: Annotated[int | None, Field(ge=1, description="steps to run in this invocation")] = None,
                    detach: Detach = None, wait_s: WaitS = 120.0) -> StartResult:
        """Start a fine-tuning run in the background (`ftagent llm_finetune --config ...` as a child process) and
        return its session id and folder once the session exists (bad input: the CLI's error, nothing written).
        Poll `status` for its progress; `cancel` ends it like Ctrl-C."""
        from ftagent.core.settings import load_settings

        given = {"benchmark": benchmark, "base_model": base_model, "dataset": dataset, "loop_n": loop_n,
                 "timeout": timeout, "upper_data_size_limit": upper_data_size_limit,
                 "user_target_scenario": user_target_scenario, "benchmark_description": benchmark_description,
                 "step_n": step_n}
        options = _options(config, **given)
        log_path = Path(load_settings(options.settings).paths.log_path)
        args = ["llm_finetune", "--quiet", *(["--config", str(Path(config).absolute())] if config else []),
                *_flags(**given)]
        return await self._launch(args, log_path, detach, wait_s, config=config)

    @tool
    async def resume(self, session: Session, config: Annotated[str | None, Field(
                         description="a run file for the settings (default: the one the session started with here)")]
                     = None, loop_n: LoopN = None, timeout: Timeout = None, detach: Detach = None,
                     wait_s: WaitS = 60.0) -> StartResult:
        """Resume a session in place in the background (`ftagent llm_finetune --path SESSION`): after `cancel`, a
        kill or a crash it goes on from its last step; with a larger `loop_n` it runs more loops."""
        folder = _session(session)
        recorded = self.runs.recorded(folder)
        config = config or (recorded.config if recorded else None)
        args = ["llm_finetune", "--quiet", "--path", str(folder), *(["--config", config] if config else []),
                *_flags(loop_n=loop_n, timeout=timeout)]
        return await self._launch(args, folder.parent, detach, wait_s, config=config, session_dir=folder)

    async def _launch(self, args: list[str], log_path: Path, detach: bool | None, wait_s: float, *,
                      config: str | None, session_dir: Path | None = None) -> StartResult:
        child = self.runs.spawn(args, log_path, detach)
        found = await self.runs.wait_for_session(child, log_path, wait_s, session_dir)
        if found is not None and session_dir is None:
            self.runs.record(found, str(Path(config).absolute()) if config else None, child)
        return StartResult(session_id=found.name if found else None, session_dir=str(found) if found else None,
                           pid=child.proc.pid, state="running" if found else "preparing", detached=child.detached,
                           console_log=str(child.console), command=child.command)

    @tool
    def status(self, session: Session) -> SessionStatus:
        """A session's state (`ftagent status SESSION --json`): running or how it ended, the current loop, step and
        progress, every loop's scores with their 95 % paired intervals and the SOTA rule's verdict, the SOTA."""
        from ftagent.views.status import session_status

        return session_status(_session(session))

    @tool
    def report(self, session: Session) -> Report:
        """A session's report (`ftagent report SESSION --json`; report.md and report.json are written too): the
        baseline, every loop, the best loop with its intervals, costs, the forecast against the actual times."""
        from ftagent.views.report import build_report, write_report

        folder = _session(session)
        write_report(folder)
        return build_report(folder)

    @tool
    def eval(self, model: Annotated[str, Field(description="a model folder, builtin/<name>, an HF repo id, or a "
                                                           "session folder (its best model)")],
             benchmark: Benchmark = None,
             split: Annotated[Literal["validation", "test", "full"], Field(description="items to score")] = "test",
             against: Annotated[str | None, Field(description="a second model: also the paired difference")] = None,
             ) -> EvalReport:
        """Score a model on a benchmark split with a session's evaluation, no session (`ftagent eval --json`): the
        score with its 95 % interval, and with `against` the paired difference on the same items."""
        from ftagent.finetune.score import run_eval

        return run_eval(model, benchmark, split, against)

    @tool
    def export(self, session: Session,
               loop: Annotated[int | None, Field(ge=0, description="loop to export (default: the best)")] = None,
               to: Annotated[str | None, Field(description="target folder, missing or empty (default: "
                                                          "SESSION/export/loop_<N>)")] = None,
               merge: Annotated[bool, Field(description="merge a LoRA adapter into the base model")] = True,
               ) -> ExportResult:
        """Export a session's model (`ftagent export`): a Hugging Face folder (LoRA merged by default) with its
        model card and reproduce/ (data script, train.yaml, commands)."""
        from ftagent.core.settings import load_settings
        from ftagent.finetune.export import ExportRequest, export_model
        from ftagent.runners.factory import get_runner

        request = ExportRequest(session_dir=_session(session), loop=loop, to=Path(to) if to else None, merge=merge)
        return export_model(request, lambda: get_runner(load_settings()))

    @tool
    async def cancel(self, session: Session, wait_s: Annotated[float, Field(
                         ge=0, le=600, description="seconds to wait for the run to end")] = 120.0) -> SessionStatus:
        """End a running session like Ctrl-C (SIGTERM to the process working in it): the running command's process
        tree is killed, the session ends `interrupted`, and `resume` goes on from its last step."""
        from ftagent.views.status import session_status

        folder = _session(session)
        now = session_status(folder)
        if not now.alive or now.holder is None:
            raise UserInputError(f"session {folder.name} is not running here (state: {now.state}); nothing to cancel")
        os.kill(now.holder.pid, signal.SIGTERM)
        deadline = time.monotonic() + wait_s
        while now.alive and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            self.runs.reap()  # a run of this server's is its child: reaped, it is gone
            now = session_status(folder)
        return now

    @tool
    def list_sessions(self, log_path: Annotated[str | None, Field(
            description="a folder of sessions (default: the server's LOG_PATH)")] = None) -> SessionList:
        """Every session under LOG_PATH, oldest first (`ftagent status --json`): id, folder, state, benchmark,
        base model, loops done, the SOTA's validation score."""
        from ftagent.views.lookup import session_summaries

        folder = Path(log_path) if log_path else _log_path()
        return SessionList(log_path=str(folder), sessions=session_summaries(folder))

    @tool
    def benchmarks(self) -> BenchmarkList:
        """Every benchmark (`ftagent benchmarks list --json`): key, category, description, core metric and
        direction, data source, the training datasets related to it."""
        from ftagent.benchmarks import benchmark_specs

        return BenchmarkList(benchmarks=benchmark_specs())

    @tool
    def datasets(self, benchmark: Annotated[str | None, Field(
            description="only the datasets related to this benchmark")] = None) -> DatasetList:
        """The registered raw training datasets (`ftagent datasets list --json`): source, prepared or not here, the
        benchmarks they serve."""
        from ftagent.core.settings import load_settings
        from ftagent.datasets.listing import dataset_rows

        return DatasetList(datasets=dataset_rows(Path(load_settings().ft.file_path), benchmark))

    @tool
    def models(self) -> ModelList:
        """Built-in models with their build status, and the model folders under FT_FILE_PATH/models (`ftagent models
        list --json`)."""
        from ftagent.core.settings import load_settings
        from ftagent.models.base_model import list_models

        return ModelList(models=[ModelRow(**row) for row in list_models(Path(load_settings().ft.file_path))])


def _options(config: str | None, **given: Any) -> Any:
    """``FinetuneOptions`` of a run file and the options given over it (the CLI's ``--config`` + flags), checked
    as the CLI checks them."""
    from ftagent.core.run_config import RunConfig, effective_options, load_run_file
    from ftagent.finetune.app import FinetuneOptions

    run_file = load_run_file(config) if config else None
    from_file = effective_options(run_file) if run_file else {}
    if "path" in from_file:
        raise UserInputError(f"run file {config}: 'path' resumes a session: use the resume tool")
    if from_file.get("plan"):
        raise UserInputError(f"run file {config}: 'plan: true' only forecasts: use the plan tool")
    values = {k: v for k, v in from_file.items() if k in FinetuneOptions.model_fields and k in RunConfig.model_fields
              and k != "quiet"}
    values |= {k: v for k, v in given.items() if v is not None}
    return FinetuneOptions(**values, quiet=True, settings=dict(run_file.settings) if run_file else {})
