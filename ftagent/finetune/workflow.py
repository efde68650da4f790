"""The fine-tuning workflow: propose → code → validate → train → evaluate → feedback.

Each step delegates to one pluggable component (:mod:`ftagent.finetune.protocols`), writes its
result into one typed field of the loop state (:class:`~ftagent.finetune.state.FinetuneLoop`) and
records a typed event. Later steps read those fields as objects; nothing is re-validated from a dict.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ftagent.core.disk import check_disk_full, is_disk_full
from ftagent.core.errors import ErrorType, StepError
from ftagent.core.gold_match import gold_matches
from ftagent.core.holdout import split_record
from ftagent.core.sota import decide_sota, differences
from ftagent.core.stage_specs import stage_spec
from ftagent.core.trace import Experiment, Trace
from ftagent.core.types import ScenarioInfo, ValidationReport
from ftagent.engine.events import (
    CodeRound,
    FeedbackEvent,
    ForgettingEvent,
    HypothesisEvent,
    IntegrityEvent,
    Message,
    TrainingEvent,
    ValidationEvent,
)
from ftagent.engine.loop import Goto, StepContext, StepFn
from ftagent.finetune.approval import (
    approve,
    data_run_dir,
    freeze_code,
    frozen_dir,
    prepare_data_run,
    require_unchanged,
    scrub_workspace,
    seal_data,
    seal_model,
)
from ftagent.finetune.components import Components
from ftagent.finetune.forgetting_guard import ForgettingGuard
from ftagent.finetune.loop_folders import workspace_dir
from ftagent.finetune.loop_record import benchmark_event, experiment_of, progress_events
from ftagent.finetune.proposals import Proposals
from ftagent.finetune.stage_prepare import SAMPLES_FILE, prepare_stage
from ftagent.finetune.state import FinetuneLoop, FinetuneSessionState, finetune_loop
from ftagent.finetune.trials_seen import validated_steps
from ftagent.integrity.guard import IntegrityGuard, start_loop

STEP_NAMES = ("propose", "code", "validate", "train", "evaluate", "feedback")


class FinetuneWorkflow:
    """Binds the components to the engine's step protocol over :class:`FinetuneLoop`.

    With K trials at once (``ftagent.engine.parallel``) each slot has its own components (built on the
    slot's view of the scenario and a runner that gives its commands the slot's GPUs, cores and ports:
    ``for_slot``), propose and feedback run one at a time (``serial_steps``), and the proposals of a
    round are distinct and see each other (:class:`~ftagent.finetune.proposals.Proposals`).
    """

    feedback_step = "feedback"
    serial_steps = ("propose", "feedback")  # the two steps that read and write the shared trace

    def __init__(self, scenario: ScenarioInfo, components: Components, *, coder_max_loop: int,
                 sota_min_delta: float, workspace_root: Path, sota_rule: str = "interval",
                 integrity: IntegrityGuard | None = None, forgetting: ForgettingGuard | None = None,
                 family_size: int = 1,
                 for_slot: Callable[[Any], tuple[Components, ForgettingGuard | None]] | None = None) -> None:
        self.scenario = scenario
        self.c = components
        self.for_slot = for_slot  # a slot -> its components and forgetting guard (built once per slot and GPU set)
        self._slot_parts: dict[tuple[int, tuple[str, ...]], tuple[Components, ForgettingGuard | None]] = {}
        self._slot_lock = threading.Lock()
        self.proposals = Proposals()
        self.min_delta = sota_min_delta
        self.sota_rule = sota_rule  # FT_SOTA_RULE, applied by ftagent.core.sota.decide_sota
        self.family_size = max(1, family_size)  # the slots: candidates judged per round (Holm, core.sota_family)
        self.workspace_root = Path(workspace_root)
        self.integrity = integrity  # the integrity guard (issue 31.5); None: not run (unit tests' fakes)
        if integrity is not None:  # the benchmark/evaluator hashes, before any loop's generated code runs
            integrity.record_start()
        self.forgetting = forgetting  # the forgetting guard (issue 31.6); None: FT_GUARD_BENCHMARKS is empty
        # rounds of code → validate in one loop: the first plus at most max_loop - 1 retries
        self.goto_caps = {"code": max(0, coder_max_loop - 1)}

    # -- the engine's Workflow protocol ------------------------------------------------------------
    def steps(self) -> list[tuple[str, StepFn[FinetuneSessionState]]]:
        return [(name, getattr(self, name)) for name in STEP_NAMES]

    def new_loop(self, index: int) -> FinetuneLoop:
        return FinetuneLoop(index=index)

    def is_best_loop(self, state: FinetuneSessionState, index: int) -> bool:
        return state.trace.sota_loop == index

    def produced_result(self, state: FinetuneSessionState) -> bool:
        """A loop's candidate got a validation score (beaten the baseline or not): a session without one
        trained nothing it could show (``no_model``)."""
        return any(e.val_score is not None for e in state.trace.experiments)

    @property
    def disk_folders(self) -> list[Path]:
        """Where the steps write: named with their free space when a disk fills (the engine's rule)."""
        return [self.workspace_root, Path(self.scenario.file_path or ".")]

    # -- helpers -----------------------------------------------------------------------------------
    def workspace(self, session_id: str, loop: int) -> Path:
        return workspace_dir(self.workspace_root, session_id, loop)

    @staticmethod
    def _loop(ctx: StepContext[FinetuneSessionState]) -> FinetuneLoop:
        return finetune_loop(ctx.loop)

    def _slot(self, ctx: StepContext[FinetuneSessionState]) -> tuple[Components, ForgettingGuard | None]:
        """The components and guard of the slot this step runs on (the session's one trial at a time). A slot
        lent with other GPUs (a Ray lease) gets components built for those."""
        slot = getattr(ctx, "slot", None)
        if slot is None or self.for_slot is None or not hasattr(slot, "gpus"):
            return self.c, self.forgetting
        key = (slot.index, tuple(slot.gpus))
        with self._slot_lock:
            if key not in self._slot_parts:
                self._slot_parts[key] = self.for_slot(slot)
            return self._slot_parts[key]

    def parts(self, ctx: StepContext[FinetuneSessionState]) -> Components:
        """The components of the slot this step runs on (the session's when trials run one at a time)."""
        return self._slot(ctx)[0]

    def _forgetting_guard(self, ctx: StepContext[FinetuneSessionState]) -> ForgettingGuard | None:
        return self._slot(ctx)[1]

    # -- steps -------------------------------------------------------------------------------------
    def propose(self, ctx: StepContext[FinetuneSessionState]) -> None:
        loop = self._loop(ctx)
        hypothesis = self.proposals.next(self.parts(ctx).proposer, ctx.state.trace, ctx)
        loop.hypothesis = hypothesis
        ctx.emit(HypothesisEvent(reason=hypothesis.reason, hypothesis=hypothesis.hypothesis,
                                 task=hypothesis.task, parent=hypothesis.parent,
                                 skip_data_processing=hypothesis.skip_data_processing,
                                 planner=hypothesis.planner, stage=hypothesis.stage,
                                 weights_from=hypothesis.weights_from))

    def code(self, ctx: StepContext[FinetuneSessionState]) -> None:
        loop = self._loop(ctx)
        assert loop.hypothesis is not None
        previous = loop.report  # set only when validation sent us back here
        feedback = previous.failure if previous is not None and not previous.passed else None
        workspace = self.workspace(ctx.state.session_id, loop.index)
        workspace.mkdir(parents=True, exist_ok=True)
        scrub_workspace(workspace, ctx)
        prepare_stage(self.parts(ctx).stages, loop, ctx.state.trace, workspace.parent, workspace, ctx)  # issue 40
        result = self.parts(ctx).coder.code(loop.hypothesis, ctx.state.trace, workspace, feedback, ctx)
        result.stage, result.start, result.reward = loop.hypothesis.stage, loop.start, loop.reward  # the system's
        if loop.samples is not None:  # frozen with the code: the full data run (data/loop_<n>/) reads it too
            result.files[SAMPLES_FILE] = loop.samples.path
        result.round = loop.gotos.get("code", 0) + 1
        loop.code, loop.report = result, None
        ctx.emit(CodeRound(round=result.round, files=result.files))

    def validate(self, ctx: StepContext[FinetuneSessionState]) -> Goto | None:
        loop = self._loop(ctx)
        assert loop.code is not None and loop.hypothesis is not None
        frozen = frozen_dir(self.workspace_root, ctx.state.session_id, loop.index)
        try:
            scrub_workspace(Path(loop.code.workspace), ctx)
            freeze_code(loop.code, frozen)  # what the debug run runs is what the full run will run
            self.parts(ctx).data.prepare(loop.code, loop.hypothesis, ctx.state.trace, ctx, debug=True)
            report = self.parts(ctx).validator.validate(loop.code, ctx)
            if report.passed:  # what validation approved, frozen outside the workspace (issue 39 item 2)
                report.approved = approve(loop.code, report, frozen,
                                          data_run_dir(self.workspace_root, ctx.state.session_id, loop.index))
                # its default_system is in every prompt: scanned like a row's system (issue 39 red team B3)
                self.parts(ctx).data.scan_config(report.approved.config_path)
        except StepError as exc:
            report = ValidationReport(passed=False, failure=exc.to_failure("validate"))
        loop.report = report
        if report.failure is not None and is_disk_full(f"{report.failure.message}\n{report.failure.log_tail}"):
            report.failure.error_type = ErrorType.ENV  # no code round's fault: the session stops below
        ctx.emit(ValidationEvent(passed=report.passed, data_stats=report.data_stats,
                                 dropped_keys=report.dropped_keys, injected_keys=report.injected_keys,
                                 failure=report.failure, planned_steps=validated_steps(report, self.scenario, ctx)))
        if report.failure is not None:  # a full disk: another code round would fill it again (issue 34.1)
            check_disk_full(f"{report.failure.message}\n{report.failure.log_tail}", "validation",
                            self.disk_folders)
        if not report.passed:
            return Goto("code", reason=report.failure.summary() if report.failure else "validation failed",
                        error_type=report.failure.error_type if report.failure else None)
        ctx.emit(CodeRound(round=loop.code.round, files=loop.code.files, accepted=True))  # this round is kept
        return None

    def train(self, ctx: StepContext[FinetuneSessionState]) -> None:
        loop = self._loop(ctx)
        assert loop.code is not None and loop.report is not None and loop.hypothesis is not None
        approved = loop.report.approved
        scrub_workspace(Path(loop.code.workspace), ctx)
        require_unchanged(approved, "training")
        # the full data run in its own fresh folder, from the frozen code: it can write only its own output
        data_code = prepare_data_run(loop.code, approved) if approved is not None else loop.code
        rows = self.parts(ctx).data.prepare(data_code, loop.hypothesis, ctx.state.trace, ctx, debug=False)
        if rows is not None:
            loop.report.data_stats["train_rows"] = rows
        if approved is not None:
            seal_data(approved, data_format=stage_spec(loop.hypothesis.stage).data)  # issue 40: the stage's rows
        result = self.parts(ctx).trainer.train(loop.code, loop.report, ctx)
        seal_model(approved, Path(result.model_path))
        loop.model = result
        ctx.emit(TrainingEvent(output_dir=result.output_dir, finetuning_type=result.finetuning_type,
                               loss_history=result.loss_history, train_runtime_s=result.train_runtime_s,
                               config=result.config, stage=result.stage, chain=result.chain))

    def evaluate(self, ctx: StepContext[FinetuneSessionState]) -> None:
        """Validation drives the loop; the test split is only recorded (its failure never fails the loop)."""
        loop = self._loop(ctx)
        assert loop.model is not None
        scrub_workspace(Path(loop.code.workspace if loop.code else loop.model.output_dir), ctx)
        require_unchanged(loop.report.approved if loop.report is not None else None, "evaluation")
        out = self.parts(ctx).evaluator.evaluate_splits(loop.model, ctx, ("validation", "test"),
                                               on_progress=progress_events(ctx.emit))
        loop.scores.validation = out.require("validation")  # its failure fails the loop
        ctx.emit(benchmark_event(loop.scores.validation))
        self._track_scores(ctx, loop)
        if "test" in out:
            loop.scores.test = out["test"]
            ctx.emit(benchmark_event(loop.scores.test))
        else:  # report-only: the agent must not see it
            failure = out.failures["test"]
            loop.scores.test_error = failure.summary()[:500]
            ctx.emit(Message(level="warning", text=f"test evaluation failed (report only): {failure.message}"[:500]))

    def _track_scores(self, ctx: StepContext[FinetuneSessionState], loop: FinetuneLoop) -> None:
        """The validation score into the loop's tracker run (``FT_REPORT_TO``); a failure is only a warning.
        The test score is not sent: see :mod:`ftagent.tools.llamafactory.tracking`."""
        log_scores = getattr(self.parts(ctx).trainer, "log_scores", None)  # optional: a plug-in trainer may not track
        if log_scores is None or loop.model is None:
            return
        try:
            result = log_scores(loop.model, loop.scores.validation, ctx, baseline=ctx.state.trace.baseline_val)
        except Exception as exc:  # noqa: BLE001 - the tracker is a display; the score is in the events
            ctx.emit(Message(level="warning", text=f"tracker: validation score not logged: {exc}"[:500]))
            return
        if result is not None and not result.ok:
            ctx.emit(Message(level="warning", text=f"tracker: validation score not logged (exit {result.exit_code}; "
                                                   f"see {result.log_file})"[:500]))

    def feedback(self, ctx: StepContext[FinetuneSessionState]) -> None:
        loop = self._loop(ctx)
        trace = ctx.state.trace
        trace.family_size = self.family_size  # before anything judges: K candidates per round
        experiment = experiment_of(loop)
        if trace.holdout is not None:  # validation's parts, from the one run's items (issue 39 item 5)
            experiment.parts = split_record(experiment.val_items, trace.holdout)
        # the paired intervals vs baseline / SOTA, computed once: the feedback component reads them
        experiment.intervals = differences(experiment, trace)
        if self.integrity is not None and experiment.succeeded:  # before anything decides: a flag vetoes SOTA
            guard = self.integrity.check(experiment, parent=start_loop(experiment, trace))
            experiment.integrity_flags = [f"{c.name}: {c.detail}" for c in guard.flagged]
            ctx.emit(IntegrityEvent(checks=guard.checks, flags=len(guard.flagged), duration_s=guard.seconds))
        suspect = gold_matches(experiment.error_samples) if experiment.succeeded else None
        if suspect is not None:  # issue 35: right answers scored wrong are the evaluation's problem, not the model's
            ctx.emit(Message(level="warning", text=f"loop {experiment.loop} validation: {suspect.text()}: a "
                                                   "probable evaluation error (the scorer or the answer format), "
                                                   "not a model failure"))
        self._forgetting(ctx, loop, experiment, trace)
        result = self.parts(ctx).feedback.feedback(experiment, trace, ctx)
        # numbers decide; the component's text explains (it cannot turn a loss into a win)
        verdict = decide_sota(experiment, trace, rule=self.sota_rule, min_delta=self.min_delta)
        numeric = experiment.succeeded and verdict.decision
        experiment.judged = verdict.judgment if experiment.succeeded else None  # its place in its round
        experiment.decision, experiment.reason = numeric, result.reason
        experiment.next_step = result.next_step
        incumbent = trace.incumbent_score()
        trace.record(experiment)
        loop.feedback = result.model_copy(update={"decision": numeric})
        ctx.emit(FeedbackEvent(decision=numeric, reason=result.reason, next_step=result.next_step,
                               error_type=experiment.failure.error_type.value if experiment.failure else None,
                               score=experiment.val_score, sota_score=incumbent, rule=verdict.rule,
                               verdict=verdict.text, intervals=experiment.intervals, parts=experiment.parts,
                               judgment=experiment.judged))


    def _forgetting(self, ctx: StepContext[FinetuneSessionState], loop: FinetuneLoop, experiment: Experiment, trace: Trace) -> None:
        """The forgetting guard, only for a candidate the target score would make SOTA (it costs an
        evaluation per guard benchmark); a blocked result then vetoes it in decide_sota."""
        guard = self._forgetting_guard(ctx)
        if guard is None or loop.model is None or not experiment.succeeded:
            return
        if not decide_sota(experiment, trace, rule=self.sota_rule, min_delta=self.min_delta).decision:
            return
        ctx.emit(Message(text=f"forgetting guard: scoring {', '.join(guard.keys)} "
                              f"({guard.sample} items each) for this candidate"))
        experiment.forgetting = guard.check(loop.model, timeout=ctx.limit(guard.timeout_s))
        ctx.emit(ForgettingEvent(results=experiment.forgetting, blocked=sum(r.blocked for r in experiment.forgetting)))
