"""The one owner of a session's start: ``ftagent llm_finetune`` and ``ftagent demo`` come here.

Order (nothing is written under ``LOG_PATH`` before the first three succeed):

1. validate the options: benchmark, base model name, dataset choice, planner, settings (UserInputError →
   exit 2): the one start-up sequence, :func:`ftagent.finetune.start.start`;
2. resume: load the snapshot (checkout in place, or fork with its own workspace);
3. new session: prepare datasets, base model and benchmark data (bad input → exit 2 / 1, no session);
4. create the session, then build the rest of the scenario and the baseline inside the time budget
   (a failed baseline → one clear error, the session ends ``env_error``, exit 1);
5. build the components once, run the loop engine, write the report.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field
from rich.console import Console

from ftagent.core.disk import check_disk_full
from ftagent.core.durations import parse_duration
from ftagent.core.errors import EnvironmentFailure, UserInputError
from ftagent.engine.events import Message, ScenarioStage, SessionEnd, SessionStart
from ftagent.engine.loop import RunSummary
from ftagent.engine.session import Session
from ftagent.finetune.emitter import SessionEmitter
from ftagent.finetune.lifecycle import begin_run, hold
from ftagent.finetune.state import FinetuneSessionState

if TYPE_CHECKING:
    from ftagent.benchmarks.base import BenchmarkAdapter
    from ftagent.core.cpu_speed import CpuSpeedMonitor
    from ftagent.core.settings import Settings
    from ftagent.core.types import ScenarioInfo
    from ftagent.engine.loop import StepContext
    from ftagent.finetune.resolve import ResolvedRun
    from ftagent.finetune.start import Startup
    from ftagent.runners.base import Runner

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
    quiet: bool = False  # no live progress (the report is still printed)
    # a run file's settings by name (core/run_config.RunFile.settings): below the flags and the environment
    settings: dict[str, Any] = Field(default_factory=dict)


def run_finetune(options: FinetuneOptions) -> RunSummary:
    """Validate, start or resume a session, run the loop and write the report.

    Raises:
        UserInputError: bad options (the CLI exits 2; nothing has been written under LOG_PATH).
        EnvironmentFailure: the environment cannot run a session (exit 1).
    """
    from ftagent.finetune.start import start

    started = time.time()
    timeout_s = parse_duration(options.timeout) if options.timeout else None
    resumed = Session.load(options.path, FinetuneSessionState) if options.path is not None else None
    if resumed is not None and resumed[0].state.scenario is None:  # before any lock, checkout, fork or registry
        raise UserInputError(f"--path {resumed[1]}: the snapshot has no scenario (it was taken before loop 0)")
    run_cfg = resumed[0].state.config.get("run", {}) if resumed else {}
    startup = start(  # the one lookup of benchmark and model; the planner from the registry
        benchmark=options.benchmark or run_cfg.get("benchmark_file") or run_cfg.get("benchmark"),
        base_model=options.base_model or run_cfg.get("base_model"),
        dataset=options.dataset, upper_data_size_limit=options.upper_data_size_limit,
        user_target_scenario=options.user_target_scenario,
        benchmark_description=options.benchmark_description, check_datasets=resumed is None,
        file_settings=options.settings,
    )
    settings, run, planner = startup.settings, startup.run, startup.planner
    from ftagent.finetune.forgetting_guard import guard_adapters

    guards = guard_adapters(settings.ft.guard_benchmarks, run.benchmark)  # a bad key: exit 2, before any session
    from ftagent.planners.registry import writes_llm_code
    from ftagent.runners.sandbox import require_confinement

    # LLM-written code never runs unconfined (exit 2, no session); an unknown FT_ENV_TYPE exits 2 here too
    require_confinement(settings, writes_llm_code(planner, settings.ft.coder))

    from ftagent.views.console import ConsoleProgress

    loop_n = options.loop_n or run_cfg.get("loop_n")
    display = ConsoleProgress(console, loop_n=loop_n, timeout_s=timeout_s, quiet=options.quiet)
    emit = SessionEmitter(observer=display)
    display.start(resumed[0].state.elapsed_s if resumed else 0.0)
    end_run = begin_run(settings, emit)  # SIGTERM = Ctrl-C; ends what a killed predecessor left running
    from ftagent.finetune.session_reforecast import start_monitor
    from ftagent.tools.llamafactory.tracking import require_tracker

    monitor = start_monitor()  # the CPU's slowness, sampled all along: the re-forecast's "load now" (issue 43)
    try:
        runner = startup.open_runner(on_run=emit)
        require_tracker(settings.ft.report_to, runner)  # before anything is prepared: exit 2, the tracker's words
        if resumed is not None:
            session = _resume(resumed, options.checkout, settings, run, emit)
        else:
            session = _start(startup, emit, options.loop_n, timeout_s, started, monitor)
        summary = _run(session, settings, run, runner, emit, planner, options, timeout_s, monitor, guards=guards)
    except BaseException as exc:  # KeyboardInterrupt too: SIGTERM during the forecast's probe ends it 'interrupted'
        emit.end_if_open(exc)
        if isinstance(exc, OSError):  # a full LOG_PATH (an event, a record): what to free and how to resume
            check_disk_full(str(exc), "the session", [settings.paths.log_path, _workspace_root(settings)])
        raise
    finally:
        monitor.stop()
        display.stop()  # before the report: a live refresh never lands inside it
        if settings.judge_route is not None:
            settings.judge_route.stop()
            settings.judge_route = None
        end_run()
    from ftagent.views.report import write_report

    md, js = write_report(session.dir)
    # as plain text ("[train/OOM]" is no markup), unwrapped (table rows stay one line in logs)
    console.print(md.read_text(encoding="utf-8"), markup=False, highlight=False, soft_wrap=True)
    from ftagent.views.commands import next_steps

    exported = json.loads(js.read_text(encoding="utf-8")).get("best_model_path") is not None
    console.print("\n".join(next_steps(session.dir, exported=exported)), markup=False, highlight=False,
                  soft_wrap=True)
    return summary


def _session_start(session: Session[FinetuneSessionState], settings: Settings, run: ResolvedRun, resumed_from: str | None) -> SessionStart:
    return SessionStart(session_id=session.state.session_id, benchmark=run.benchmark,
                        base_model=run.base_model, planner=run.planner, runner=settings.ft.env_type,
                        resumed_from=resumed_from, settings=settings.redacted())


def deadline_limit(timeout_s: float | None, started: float, when: str) -> Callable[[float], float]:
    """A stage's own limit capped by what is left of ``--timeout`` (started at ``started``, ``time.time()``);
    raises :class:`EnvironmentFailure` naming ``when`` once nothing is left."""

    def limit(seconds: float) -> float:
        if timeout_s is None:
            return seconds
        left = timeout_s - (time.time() - started)
        if left <= 0:
            raise EnvironmentFailure(f"the time budget of {timeout_s:.0f}s was used up {when}")
        return min(seconds, left)

    return limit


def _start(startup: Startup, emit: SessionEmitter, loop_n: int | None, timeout_s: float | None,
           started: float, monitor: CpuSpeedMonitor) -> Session[FinetuneSessionState]:
    """Prepare (no session yet), create the session, then build the scenario and the baseline."""
    settings, run, planner = startup.settings, startup.run, startup.planner
    prepared = startup.prepare(emit)  # bad dataset / model / benchmark data: raises before any session exists
    from ftagent.finetune.slots import check_slots

    check_slots(settings, prepared, run)  # a K the machine cannot hold: exit 2 before any session exists
    builder, runner = startup.builder, startup.runner
    run_cfg = {"benchmark": run.benchmark, "benchmark_file": run.benchmark_file,
               "base_model": run.base_model, "loop_n": loop_n, "dataset_file": run.dataset_file,
               "dataset": run.dataset}  # a user file's copy by name: --path resumes on that copy without --dataset
    session = Session.create(Path(settings.paths.log_path), config={"run": run_cfg, "settings": settings.redacted()},
                             state_cls=FinetuneSessionState)
    hold(session)
    session.events.emit(_session_start(session, settings, run, None))
    getattr(builder, "attach_session", lambda _dir: None)(session.dir)  # the dataset selection's LLM calls join the records and the budget
    emit.attach(session)
    _route_judge(settings, session, emit)  # before the baseline: its judge calls are the session's too
    emit(Message(text=f"planner: {_planner_note(planner, settings)}"))
    state = session.state

    try:
        scenario = builder.build(prepared)
        builder.baseline(scenario, state.trace, deadline_limit(timeout_s, started, "before the baseline"))
        state.scenario = scenario
    except EnvironmentFailure as exc:
        session.events.emit(SessionEnd(status="env_error", message=str(exc)))
        raise
    from ftagent.finetune.session_forecast import record_forecast

    _forecast_stage(session, lambda: record_forecast(
        session, scenario, settings, runner, run, planner=planner, loop_n=loop_n, timeout_s=timeout_s,
        limit=deadline_limit(timeout_s, started, "before the forecast's training probe"),
        cpu_slowness=lambda: monitor.slowness(started)))
    state.elapsed_s = time.time() - started  # scenario time counts against --timeout
    return session


def _forecast_stage(session: Session[FinetuneSessionState], record: Callable[[], Any]) -> None:
    """The forecast (its training probe: ~40 s for the demo on CPU) as a scenario stage of its own.

    Issue 32: without one, the console's heartbeat kept showing the finished baseline as the current
    stage for the whole probe, as if the baseline were still running.
    """
    session.events.emit(ScenarioStage(stage="forecast", status="start"))
    try:
        record()
    finally:
        session.events.emit(ScenarioStage(stage="forecast", status="done"))


def _resume(resumed: tuple[Session[FinetuneSessionState], Path], checkout: bool, settings: Settings, run: ResolvedRun,
            emit: SessionEmitter) -> Session[FinetuneSessionState]:
    from ftagent.finetune.loop_folders import fork_workspace

    session, snapshot = resumed
    if checkout:
        hold(session)  # before anything changes: a second resume of it exits 2 naming this process
        session.checkout(snapshot)
    else:
        old_id = session.state.session_id
        session = hold(session.fork(Path(settings.paths.log_path)))
        fork_workspace(session.state, _workspace_root(settings), old_id)
    emit.attach(session)  # (a snapshot without a scenario was refused by run_finetune before anything was written)
    session.events.emit(_session_start(session, settings, run, str(snapshot)))
    _route_judge(settings, session, emit)
    return session


def _route_judge(settings: Settings, session: Session[FinetuneSessionState], emit: SessionEmitter) -> None:
    """Start the session's judge gateway when ``FT_JUDGE_*`` is set: OpenCompass's judge then gets its
    URL and a per-session token (never the real key), and every judge call is recorded (stage ``judge``)
    and counted against ``FT_LLM_BUDGET_USD`` with the planner's and the data script's."""
    from ftagent.llm.gateway import LLMGateway

    gateway = LLMGateway.for_judge(settings.llm, settings.ft, session.dir, emit=emit)
    settings.judge_route = gateway.start() if gateway is not None else None


def _workspace_root(settings: Settings) -> Path:
    return Path(settings.paths.workspace_path).absolute()


def _planner_note(planner: str, settings: Settings) -> str:
    from ftagent.planners.registry import planner_spec

    if not planner_spec(planner).asks_llm:  # what the planner declares, not its name
        return f"offline {planner} planner (no LLM: set CHAT_MODEL and OPENAI_API_KEY to use one)"
    return f"LLM planner ({settings.llm.chat_model})"


def _run(session: Session[FinetuneSessionState], settings: Settings, run: ResolvedRun, runner: Runner, emit: SessionEmitter, planner: str,
         options: FinetuneOptions, timeout_s: float | None, monitor: CpuSpeedMonitor,
         guards: list[BenchmarkAdapter] | None = None) -> RunSummary:
    from ftagent.engine.loop import LoopEngine
    from ftagent.finetune.components import build_components
    from ftagent.finetune.forgetting_guard import ForgettingGuard
    from ftagent.finetune.session_reforecast import Reforecaster
    from ftagent.finetune.workflow import FinetuneWorkflow
    from ftagent.integrity.guard import IntegrityGuard
    from ftagent.integrity.references import FILE_NAME as REFERENCES_FILE

    ft = settings.ft
    state = session.state
    assert state.scenario is not None
    console.print(f"[bold]ftagent[/bold] session {session.dir} — planner: {_planner_note(planner, settings)}; "
                  f"runner: {ft.env_type}", soft_wrap=True)
    from ftagent.llm.gateway import LLMGateway

    # generated code reaches the LLM only through the session's loopback gateway (URL + token, no key)
    gateway = LLMGateway(settings.llm, ft, session.dir, emit=emit).start() if settings.llm.configured else None
    try:
        def components_for(scenario: ScenarioInfo, slot_runner: Any) -> Any:
            return build_components(scenario, settings, slot_runner, planner,
                                    llm_gateway_url=gateway.url if gateway else None,
                                    llm_gateway_token=gateway.token if gateway else None, run=run)

        def guard_for(scenario: ScenarioInfo, slot_runner: Any) -> ForgettingGuard | None:
            return ForgettingGuard(scenario, settings, slot_runner, adapters=guards,
                                   inference=run.model.inference) if guards else None

        from ftagent.finetune.slots import ONE_AT_A_TIME, end_tool_processes, trials_at_once

        at_once = trials_at_once(settings, state.scenario, runner, in_flight=bool(state.running),
                                 make_components=components_for, make_forgetting=guard_for,
                                 inference=run.model.inference, emit=emit, session_dir=session.dir)
        slots = at_once or ONE_AT_A_TIME
        workflow = FinetuneWorkflow(
            state.scenario, components_for(state.scenario, runner), coder_max_loop=ft.coder_max_loop,
            sota_min_delta=ft.sota_min_delta, workspace_root=_workspace_root(settings), sota_rule=ft.sota_rule,
            integrity=IntegrityGuard.for_spec(state.scenario, run.spec, references_file=session.dir / REFERENCES_FILE,
                                              baseline_configs=state.trace.baseline_eval_configs),
            forgetting=guard_for(state.scenario, runner), family_size=slots.k, for_slot=slots.for_slot)
        total = options.loop_n or state.config.get("run", {}).get("loop_n") or 1
        from ftagent.finetune.final_evaluation import final_evaluation
        from ftagent.finetune.saturation import first_guard, saturation_guard

        def finish(ctx: StepContext[FinetuneSessionState]) -> None:  # FT_FINAL_EVAL: the best and the base model on the final item set
            final_evaluation(session, settings, run, runner, ctx.emit, timeout=ctx.limit(ft.benchmark_timeout_s))

        # after every step: what is left, from this session's step times and the load now (issue 43)
        reforecaster = Reforecaster(session, monitor, steps=[name for name, _ in workflow.steps()],
                                    feedback_step=workflow.feedback_step, loop_n=total,
                                    gpus=state.scenario.hardware.gpu_count, emit=session.events.emit, slots=slots.k)
        session.events.subscribe(reforecaster)
        summary = LoopEngine(workflow, session, loop_n=total, step_n=options.step_n, timeout_s=timeout_s,
                             finish=finish, pool=slots.pool,
                             # a best at the metric's maximum ends the session before a re-forecast is asked
                             loop_guard=first_guard(*([partial(saturation_guard, loop_n=total)]
                                                      if ft.stop_at_maximum else []), reforecaster.loop_guard),
                             interrupt=end_tool_processes).run()
    finally:
        if gateway is not None:
            gateway.stop()
    return summary
