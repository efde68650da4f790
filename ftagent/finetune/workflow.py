"""The fine-tuning workflow: propose → code → validate → train → evaluate → feedback.

Each step delegates to a pluggable component (see :mod:`ftagent.finetune.protocols`) and records typed
events. Step outputs are pydantic models stored in the snapshot, so any step can be resumed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ftagent.core.errors import ErrorType, StepError, StepFailure
from ftagent.core.trace import Experiment
from ftagent.core.types import CodeResult, EvalResult, Hypothesis, ScenarioInfo, TrainResult, ValidationReport
from ftagent.engine.events import (
    BenchmarkResult,
    CodeRound,
    FeedbackEvent,
    HypothesisEvent,
    TrainingEvent,
    ValidationEvent,
)
from ftagent.engine.loop import Goto, StepContext
from ftagent.finetune.protocols import Coder, Evaluator, Feedback, Proposer, Trainer, Validator

STEP_NAMES = ("propose", "code", "validate", "train", "evaluate", "feedback")


@dataclass
class Components:
    """The six pluggable parts of a loop, plus the data-processing hooks they share."""

    proposer: Proposer
    coder: Coder
    validator: Validator
    trainer: Trainer
    evaluator: Evaluator
    feedback: Feedback
    data: Any  # ftagent.tools.llamafactory.data_script:DataProcessor (debug/full runs + contamination scan)


class FinetuneWorkflow:
    """Binds the components to the engine's step protocol."""

    feedback_step = "feedback"

    def __init__(self, scenario: ScenarioInfo, components: Components, coder_max_loop: int,
                 sota_min_delta: float = 0.0, runner: Any = None) -> None:
        self.scenario = scenario
        self.c = components
        self.min_delta = sota_min_delta
        self.runner = runner  # a RecordingRunner: its subprocess runs are attributed to the current step
        # rounds of code → validate in one loop: the first plus at most max_loop - 1 retries
        self.goto_caps = {"code": max(0, coder_max_loop - 1)}

    def steps(self):
        return [(name, self._bound(getattr(self, name))) for name in STEP_NAMES]

    def _bound(self, fn):
        """Let a recording runner attribute its subprocess runs to the step being executed."""

        def step(ctx: StepContext):
            if hasattr(self.runner, "ctx"):
                self.runner.ctx = ctx
            return fn(ctx)

        return step

    # -- helpers ---------------------------------------------------------------------------------
    def _workspace(self, ctx: StepContext) -> Path:
        root = Path(self.scenario.workspace_root) / ctx.state.session_id / f"loop_{ctx.loop.index}"
        root.mkdir(parents=True, exist_ok=True)
        return root

    # -- steps -----------------------------------------------------------------------------------
    def propose(self, ctx: StepContext) -> Hypothesis:
        hypothesis = self.c.proposer.propose(self.scenario, ctx.state.trace, ctx)
        ctx.emit(HypothesisEvent(reason=hypothesis.reason, hypothesis=hypothesis.hypothesis,
                                 task=hypothesis.task, parent=hypothesis.parent,
                                 skip_data_processing=hypothesis.skip_data_processing,
                                 planner=hypothesis.planner))
        return hypothesis

    def code(self, ctx: StepContext) -> CodeResult:
        hypothesis = Hypothesis.model_validate(ctx.output("propose"))
        previous = ctx.output("validate")
        feedback = None
        if previous and previous.get("failure"):
            feedback = StepFailure.model_validate(previous["failure"])
        workspace = self._workspace(ctx)
        result = self.c.coder.code(hypothesis, self.scenario, ctx.state.trace, workspace, feedback, ctx)
        result.round = ctx.loop.gotos.get("code", 0) + 1
        ctx.emit(CodeRound(round=result.round, files=result.files))
        return result

    def validate(self, ctx: StepContext) -> ValidationReport | Goto:
        code = CodeResult.model_validate(ctx.output("code"))
        hypothesis = Hypothesis.model_validate(ctx.output("propose"))
        try:
            self.c.data.prepare(code, hypothesis, ctx.state.trace, ctx, debug=True)
            report = self.c.validator.validate(code, self.scenario, ctx)
        except StepError as exc:
            report = ValidationReport(passed=False, failure=exc.to_failure("validate"))
        ctx.emit(ValidationEvent(passed=report.passed, data_stats=report.data_stats,
                                 dropped_keys=report.dropped_keys, injected_keys=report.injected_keys,
                                 failure=report.failure))
        if not report.passed:
            reason = report.failure.summary() if report.failure else "validation failed"
            return Goto("code", reason=reason, output=report)
        ctx.emit(CodeRound(round=code.round, files=code.files, accepted=True))  # this round's code is kept
        return report

    def train(self, ctx: StepContext) -> TrainResult:
        code = CodeResult.model_validate(ctx.output("code"))
        report = ValidationReport.model_validate(ctx.output("validate"))
        hypothesis = Hypothesis.model_validate(ctx.output("propose"))
        self.c.data.prepare(code, hypothesis, ctx.state.trace, ctx, debug=False)
        result = self.c.trainer.train(code, report, self.scenario, ctx)
        ctx.emit(TrainingEvent(output_dir=result.output_dir, finetuning_type=result.finetuning_type,
                               loss_history=result.loss_history, train_runtime_s=result.train_runtime_s,
                               config=result.config))
        return result

    def evaluate(self, ctx: StepContext) -> dict[str, Any]:
        model = TrainResult.model_validate(ctx.output("train"))
        results: dict[str, Any] = {}
        for split in ("validation", "test"):
            res = self.c.evaluator.evaluate(model, self.scenario, split, ctx)
            ctx.emit(_benchmark_event(res))
            results[split] = res.model_dump(mode="json")
        return results

    def feedback(self, ctx: StepContext) -> dict[str, Any]:
        experiment = self._experiment(ctx)
        trace = ctx.state.trace
        result = self.c.feedback.feedback(experiment, trace, self.scenario, ctx)
        # numbers decide; the component's text explains (it cannot turn a loss into a win)
        numeric = experiment.succeeded and trace.is_new_sota(experiment.val_score, self.min_delta)
        experiment.decision = numeric
        experiment.reason = result.reason
        incumbent = trace.incumbent_score()
        trace.record(experiment)
        ctx.emit(FeedbackEvent(decision=numeric, reason=result.reason, next_step=result.next_step,
                               error_type=experiment.failure.error_type.value if experiment.failure else None,
                               score=experiment.val_score, sota_score=incumbent))
        return {**result.model_dump(mode="json"), "decision": numeric}

    def _experiment(self, ctx: StepContext) -> Experiment:
        loop = ctx.loop
        hyp = ctx.output("propose") or {}
        exp = Experiment(loop=loop.index, parent=hyp.get("parent"), hypothesis=hyp, failure=loop.failure)
        recipe = (hyp.get("plan") or {}).get("recipe")
        code = ctx.output("code")
        if code:
            exp.artefacts.update(code.get("files", {}))
            exp.artefacts["workspace"] = code.get("workspace", "")
        train = ctx.output("train")
        if train:
            exp.artefacts["model"] = train["model_path"]
            exp.artefacts["output_dir"] = train["output_dir"]
            exp.config = dict(train.get("config", {}))
            exp.hypothesis = {**hyp, "loss_history": train.get("loss_history", [])}
        if recipe:
            exp.config["recipe"] = recipe
        evaluation = ctx.output("evaluate") or {}
        if "validation" in evaluation:
            val = evaluation["validation"]
            exp.val_score, exp.val_metrics = val.get("score"), val.get("metrics", {})
            exp.hypothesis["error_samples"] = val.get("error_samples", [])
        if "test" in evaluation:
            exp.test_score = evaluation["test"].get("score")
        if exp.failure is None and exp.val_score is None and loop.outputs.get("train"):
            exp.failure = StepFailure(stage="evaluate", error_type=ErrorType.EVAL, message="no validation score")
        return exp


def _benchmark_event(res: EvalResult, baseline: bool = False) -> BenchmarkResult:
    return BenchmarkResult(split=res.split, benchmark=res.benchmark, core_metric=res.core_metric,
                           score=res.score, metrics=res.metrics, error_samples=res.error_samples,
                           cached=res.cached, baseline=baseline)


def build_components(scenario: ScenarioInfo, settings: Any, runner: Any) -> tuple[Components, str]:
    """Instantiate the six components from their settings; returns them and the planner name."""
    from ftagent.core.registry import load_object
    from ftagent.tools.llamafactory.data_script import DataProcessor

    ft = settings.ft
    planner = ft.planner
    if planner == "auto":
        planner = "llm" if settings.llm.configured else "heuristic"
    defaults = {
        "heuristic": ("ftagent.planners.heuristic.planner:HeuristicProposer", "ftagent.planners.heuristic.planner:HeuristicCoder",
                      "ftagent.planners.heuristic.planner:HeuristicFeedback"),
        "llm": ("ftagent.planners.llm.propose:LLMProposer", "ftagent.planners.llm.code:LLMCoder",
                "ftagent.planners.llm.feedback:LLMFeedback"),
    }[planner]

    def make(path: str, default: str, **kw):
        cls = load_object(default if path == "auto" else path)
        return cls(scenario, settings, **kw)

    # LLM components build their client per step (LLMClient.for_context), so every call is recorded
    # into the session and emitted as an event.
    components = Components(
        proposer=make(ft.proposer, defaults[0]),
        coder=make(ft.coder, defaults[1]),
        validator=make(ft.validator, ft.validator, runner=runner),
        trainer=make(ft.trainer, ft.trainer, runner=runner),
        evaluator=make(ft.evaluator, ft.evaluator, runner=runner),
        feedback=make(ft.feedback, defaults[2]),
        data=DataProcessor(scenario, settings, runner),
    )
    return components, planner


def start_or_resume(settings: Any, *, resumed: Any = None, checkout: bool = True, loop_n: int | None = None,
                    step_n: int | None = None, timeout_s: float | None = None):
    """Create (or resume) a session, initialise the scenario, run the engine, write the report."""
    from rich.console import Console

    from ftagent.engine.events import EventLog, Message, SessionStart
    from ftagent.engine.loop import LoopEngine
    from ftagent.engine.session import Session
    from ftagent.runners.factory import get_runner
    from ftagent.runners.recording import RecordingRunner
    from ftagent.views.report import write_report

    console = Console(stderr=True)
    ft = settings.ft
    runner = RecordingRunner(get_runner(settings))
    if resumed is not None:
        session, snapshot = resumed
        if checkout:
            session.checkout(snapshot)
        else:
            session = session.fork(settings.paths.log_path)
        scenario = ScenarioInfo.model_validate(session.state.scenario)
    else:
        run_cfg = {"benchmark": ft.target_benchmark, "base_model": ft.base_model, "loop_n": loop_n}
        session = Session.create(Path(settings.paths.log_path), config={"run": run_cfg,
                                                                       "settings": settings.redacted()})
        events = EventLog(session.events_path)
        scenario = FinetuneScenarioRunner(settings, runner, events).run(session)
    components, planner = build_components(scenario, settings, runner)
    events = EventLog(session.events_path)
    note = ("offline heuristic planner (no LLM: set CHAT_MODEL and OPENAI_API_KEY to use one)"
            if planner == "heuristic" else f"LLM planner ({settings.llm.chat_model})")
    console.print(f"[bold]ftagent[/bold] session {session.dir} — planner: {note}; runner: {ft.env_type}")
    events.emit(SessionStart(session_id=session.state.session_id, benchmark=scenario.benchmark,
                             base_model=scenario.base_model, planner=planner, runner=ft.env_type,
                             resumed_from=str(resumed[1]) if resumed else None,
                             settings=settings.redacted()))
    if resumed is None:
        events.emit(Message(text=f"planner: {note}"))
    workflow = FinetuneWorkflow(scenario, components, ft.coder_max_loop, ft.sota_min_delta, runner=runner)
    total = loop_n or session.state.config.get("run", {}).get("loop_n") or 1
    summary = LoopEngine(workflow, session, loop_n=total, step_n=step_n, timeout_s=timeout_s).run()
    md, _ = write_report(session.dir)
    console.print(md.read_text(encoding="utf-8"))
    return summary


class FinetuneScenarioRunner:
    """Runs the scenario builder (``FT_SCEN``) and the baseline evaluation, storing both in the session."""

    def __init__(self, settings: Any, runner: Any, events: Any) -> None:
        self.settings, self.runner, self.events = settings, runner, events

    def run(self, session: Any) -> ScenarioInfo:
        from types import SimpleNamespace

        from ftagent.core.registry import load_object
        from ftagent.engine.events import ScenarioStage
        from ftagent.tools.opencompass.evaluator import evaluate_baseline

        if hasattr(self.runner, "ctx"):  # record the scenario's subprocess runs (catalogue, baseline)
            self.runner.ctx = SimpleNamespace(emit=self.events.emit)
        builder = load_object(self.settings.ft.scen)(self.settings, self.runner, self.events.emit)
        scenario = builder.build()
        self.events.emit(ScenarioStage(stage="baseline", status="start"))
        baseline = evaluate_baseline(scenario, self.settings, self.runner)
        for res in baseline.values():
            self.events.emit(_benchmark_event(res, baseline=True))
        self.events.emit(ScenarioStage(stage="baseline", status="done"))
        scenario.baseline = {k: v.model_dump(mode="json") for k, v in baseline.items()}
        session.state.scenario = scenario.model_dump(mode="json")
        trace = session.state.trace
        trace.core_metric, trace.direction = scenario.core_metric, scenario.direction  # type: ignore[assignment]
        trace.baseline_val = baseline["validation"].score
        trace.baseline_test = baseline["test"].score
        return scenario
