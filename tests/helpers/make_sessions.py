"""Build REAL session folders for UI / job-status tests by running :class:`LoopEngine`.

The workflow below is a test double for the fine-tuning steps: it does no training, but it drives the
real engine (snapshots, step events, goto, failure → feedback) and emits the real event types
(HypothesisEvent, CodeRound, ValidationEvent, RunEvent, TrainingEvent with a loss history,
BenchmarkResult for validation and test, FeedbackEvent, LLMCall) and records Experiments in the trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ftagent.core.errors import ErrorType, StepError
from ftagent.core.sota import decide_sota
from ftagent.core.stats import Difference
from ftagent.core.trace import Experiment
from ftagent.core.types import CodeResult, EvalResult, Hypothesis, ModelInfo, ScenarioInfo
from ftagent.engine.events import (
    BenchmarkResult,
    CheckVerdict,
    CodeRound,
    ConstantAnswer,
    FeedbackEvent,
    HypothesisEvent,
    IntegrityEvent,
    LLMCall,
    RunEvent,
    ScenarioStage,
    SessionStart,
    TrainingEvent,
    ValidationEvent,
)
from ftagent.engine.loop import Goto, LoopEngine, StepContext
from ftagent.engine.session import Session
from ftagent.finetune.state import FinetuneLoop, FinetuneSessionState
from ftagent.jobs.tasks import JOB_FILE, TasksFile, TaskSpec, build_plan, task_descriptions


@dataclass
class LoopPlan:
    """What one scripted loop does."""

    val: float | None = None
    test: float | None = None
    fail_step: str | None = None  # "train" raises an OOM StepError there
    goto_once: bool = False  # validate sends the loop back to code once
    intervals: list[Difference] = field(default_factory=list)  # recorded by the feedback (issue 31)
    sota_rule: str | None = None  # set: the real decide_sota decides under this rule, on ``intervals``
    integrity: list[CheckVerdict] | None = None  # the integrity guard's checks (a flag vetoes SOTA)


@dataclass
class SessionPlan:
    benchmark: str = "demo_add"
    base_model: str = "builtin/tiny-qwen2"
    core_metric: str = "accuracy"
    baseline: tuple[float, float] = (0.1, 0.05)
    llm_cost_usd: float | None = 0.0125  # each planner call's price (None: a model LiteLLM has no price for)
    constant_baseline: tuple[float, float] | None = None  # what one constant answer scores (validation, test)
    loops: list[LoopPlan] = field(default_factory=lambda: [
        LoopPlan(val=0.4, test=0.35, goto_once=True),
        LoopPlan(fail_step="train"),
        LoopPlan(val=0.3, test=0.3),
    ])


class ScriptedWorkflow:
    """propose → code → validate → train → evaluate → feedback, scripted by a :class:`SessionPlan`."""

    feedback_step = "feedback"
    goto_caps = {"code": 1}

    def __init__(self, plan: SessionPlan, workspace: Path) -> None:
        self.plan = plan
        self.workspace = workspace

    def steps(self):
        return [("propose", self.propose), ("code", self.code), ("validate", self.validate),
                ("train", self.train), ("evaluate", self.evaluate), ("feedback", self.feedback)]

    def new_loop(self, index: int) -> FinetuneLoop:
        return FinetuneLoop(index=index)

    def is_best_loop(self, state, index: int) -> bool:
        return state.trace.sota_loop == index

    def produced_result(self, state) -> bool:
        return any(e.val_score is not None for e in state.trace.experiments)

    def _lp(self, ctx: StepContext) -> LoopPlan:
        return self.plan.loops[ctx.loop.index]

    def propose(self, ctx: StepContext):
        i = ctx.loop.index
        ctx.emit(LLMCall(stage="propose", model="fake/gpt", prompt_tokens=1000 + i, completion_tokens=200,
                         cost_usd=self.plan.llm_cost_usd, latency_s=1.5))
        hyp = {"hypothesis": f"LoRA rank {8 * (i + 1)} with lr 2e-4", "reason": f"loop {i} idea",
               "task": f"Train on demo_add data, loop {i}", "parent": ctx.state.trace.sota_loop}
        ctx.emit(HypothesisEvent(**hyp, planner="scripted"))
        ctx.loop.hypothesis = Hypothesis(**hyp, planner="scripted")

    def code(self, ctx: StepContext):
        ws = self.workspace / f"loop_{ctx.loop.index}"
        ws.mkdir(parents=True, exist_ok=True)
        rnd = ctx.loop.gotos.get("code", 0) + 1
        (ws / "train.yaml").write_text(f"lora_rank: {8 * (ctx.loop.index + 1)}\nlearning_rate: 2.0e-4\n")
        (ws / "process_data.py").write_text("print('processing data')\n")
        files = {"train.yaml": str(ws / "train.yaml"), "process_data.py": str(ws / "process_data.py"),
                 "missing.json": str(ws / "missing.json")}
        ctx.emit(CodeRound(round=rnd, files=files, accepted=True))
        ctx.loop.code = CodeResult(workspace=str(ws), files=files, round=rnd)

    def validate(self, ctx: StepContext):
        if self._lp(ctx).goto_once and not ctx.loop.gotos.get("code"):
            ctx.emit(ValidationEvent(passed=False, dropped_keys=["bogus_key"]))
            return Goto("code", reason="bogus_key is not a LLaMA-Factory parameter")
        ctx.emit(ValidationEvent(passed=True, data_stats={"rows": 200, "max_len": 64},
                                 dropped_keys=["report_to"], injected_keys=["output_dir"]))

    def train(self, ctx: StepContext):
        ctx.emit(RunEvent(purpose="train", command="llamafactory-cli train train.yaml", exit_code=0,
                          duration_s=12.5, runner="local"))
        if self._lp(ctx).fail_step == "train":
            raise StepError("CUDA out of memory while training", error_type=ErrorType.OOM,
                            suggestion="lower the batch size")
        history = [{"step": s, "loss": round(2.0 / s, 4)} for s in range(1, 11)]
        out = str(self.workspace / f"loop_{ctx.loop.index}" / "output")
        ctx.emit(TrainingEvent(output_dir=out, finetuning_type="lora", loss_history=history,
                               train_runtime_s=12.0, config={"lora_rank": 8}))

    def evaluate(self, ctx: StepContext):
        lp = self._lp(ctx)
        for split, score in (("validation", lp.val), ("test", lp.test)):
            ctx.emit(BenchmarkResult(
                split=split, benchmark=self.plan.benchmark, core_metric=self.plan.core_metric, score=score,
                metrics={self.plan.benchmark: {self.plan.core_metric: score}},
                error_samples=[{"question": "What is 12 + 30?", "gold": "42", "prediction": "41"}]))
        ctx.loop.scores.validation = EvalResult(benchmark=self.plan.benchmark, split="validation",
                                                core_metric=self.plan.core_metric, score=lp.val)
        ctx.loop.scores.test = EvalResult(benchmark=self.plan.benchmark, split="test",
                                          core_metric=self.plan.core_metric, score=lp.test)

    def feedback(self, ctx: StepContext):
        trace = ctx.state.trace
        failure = ctx.loop.failure
        scores = ctx.loop.scores
        val = None if failure or scores.validation is None else scores.validation.score
        test = None if failure or scores.test is None else scores.test.score
        lp = self._lp(ctx)
        experiment = Experiment(loop=ctx.loop.index, parent=trace.sota_loop, hypothesis=ctx.loop.hypothesis,
                                val_score=val, test_score=test, reason="numbers", failure=failure,
                                intervals=lp.intervals)
        if lp.integrity is not None and failure is None:  # as the workflow's guard: before anything decides
            ctx.emit(IntegrityEvent(checks=lp.integrity, flags=sum(c.flagged for c in lp.integrity)))
            experiment.integrity_flags = [f"{c.name}: {c.detail}" for c in lp.integrity if c.flagged]
        verdict = decide_sota(experiment, trace, rule=lp.sota_rule) if lp.sota_rule else None
        decision = failure is None and (verdict.decision if verdict else trace.is_new_sota(val, 0.0))
        experiment.decision = decision
        sota_before = trace.incumbent_score()
        trace.record(experiment)
        ctx.emit(FeedbackEvent(decision=decision, reason="beats SOTA" if decision else "no gain",
                               error_type=failure.error_type.value if failure else None,
                               next_step="try a higher rank", score=val, sota_score=sota_before,
                               intervals=lp.intervals, rule=verdict.rule if verdict else None,
                               verdict=verdict.text if verdict else ""))


def make_session(log_path: Path, plan: SessionPlan | None = None, *, running_after_steps: int | None = None,
                 workspace: Path | None = None) -> Path:
    """Run a scripted session under ``log_path``; returns the session directory.

    With ``running_after_steps`` the engine stops after that many steps and the final ``session_end``
    line is removed, which is what a live session looks like to a reader.
    """
    plan = plan or SessionPlan()
    session = Session.create(Path(log_path), config={"benchmark": plan.benchmark},
                             state_cls=FinetuneSessionState)
    log = session.events
    log.emit(SessionStart(session_id=session.state.session_id, benchmark=plan.benchmark,
                          base_model=plan.base_model, planner="scripted", runner="local"))
    log.emit(ScenarioStage(stage="datasets", status="done"))
    trace = session.state.trace
    trace.core_metric, (trace.baseline_val, trace.baseline_test) = plan.core_metric, plan.baseline
    for i, (split, score) in enumerate(zip(("validation", "test"), plan.baseline, strict=True)):
        constant = None if plan.constant_baseline is None else ConstantAnswer(
            score=plan.constant_baseline[i], metric=plan.core_metric, method="the most frequent gold",
            answers={plan.benchmark: "42"}, line=f"always answering '42' scores {plan.constant_baseline[i]}")
        log.emit(BenchmarkResult(split=split, benchmark=plan.benchmark, core_metric=plan.core_metric,
                                 score=score, baseline=True, constant_baseline=constant))
    session.state.scenario = ScenarioInfo(
        benchmark=plan.benchmark, base_model=plan.base_model, base_model_path="/models/scripted",
        model_info=ModelInfo(name=plan.base_model, path="/models/scripted"), file_path="/ft",
        workspace_root=str(workspace or session.dir / "workspace"))
    engine = LoopEngine(ScriptedWorkflow(plan, workspace or session.dir / "workspace"), session,
                        loop_n=len(plan.loops), step_n=running_after_steps)
    engine.run()
    if running_after_steps is not None:
        log.truncate(log.count() - 1)  # drop session_end: the session looks live
    return session.dir


def make_job(log_base: Path, job_id: str, tasks: list[tuple[TaskSpec, SessionPlan | None, int | None]]
             ) -> Path:
    """A job directory as ``job/run_ft_job.sh`` lays it out, with ``job.json`` and real sessions.

    Each task is (spec, session plan or None for a task that has not started yet, number of steps
    after which its session is left running, or None to run it to the end).
    """
    specs = [spec for spec, _, _ in tasks]
    plan = build_plan(TasksFile(tasks=specs), job_id=job_id, log_base=log_base,
                      workspace_base=Path(log_base) / "ws", ftagent_bin="ftagent", descriptions=task_descriptions(TasksFile(tasks=specs)))
    job_dir = Path(plan.job_dir)
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / JOB_FILE).write_text(plan.model_dump_json(indent=1))
    for task_plan, (_, session_plan, running) in zip(plan.tasks, tasks, strict=True):
        if session_plan is None:
            continue
        make_session(Path(task_plan.log_path), session_plan, running_after_steps=running)
    return job_dir


def _diff(against: str, reference: str, diff: float, low: float, high: float) -> Difference:
    return Difference(against=against, split="validation", reference=reference, diff=diff, low=low, high=high,
                      items=30, resamples=1000)


CLEAN = [CheckVerdict(name="tokenizer", passed=True, detail="unchanged"),
         CheckVerdict(name="benchmark_files", passed=True, detail="unchanged")]


def decisions_plan() -> SessionPlan:
    """Three loops judged by the real SOTA rule (FT_SOTA_RULE=interval) and integrity verdicts, and a
    constant-answer baseline: loop 0 a significant gain (new best), loop 1 a higher score within the
    noise (not significant), loop 2 the highest score but flagged by the integrity guard (benchmark_files)."""
    return SessionPlan(constant_baseline=(0.25, 0.2), loops=[
        LoopPlan(val=0.4, test=0.35, sota_rule="interval", integrity=CLEAN,
                 intervals=[_diff("baseline", "the baseline", 0.3, 0.2, 0.4)]),
        LoopPlan(val=0.45, test=0.4, sota_rule="interval", integrity=CLEAN,
                 intervals=[_diff("baseline", "the baseline", 0.35, 0.25, 0.45), _diff("SOTA", "loop 0", 0.05, -0.1, 0.2)]),
        LoopPlan(val=0.9, test=0.9, sota_rule="interval", intervals=[
            _diff("baseline", "the baseline", 0.8, 0.7, 0.9), _diff("SOTA", "loop 0", 0.5, 0.4, 0.6)], integrity=[
            *CLEAN[:1], CheckVerdict(name="benchmark_files", passed=False,
                                       detail="the evaluator's files changed: ftagent/benchmarks/demo_add.py")]),
    ])
