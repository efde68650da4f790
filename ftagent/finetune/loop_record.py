"""What a loop leaves in the trace and the event log: :func:`experiment_of` (the trace's record of a finished or
failed loop, built from its typed state) and the evaluation's events (:func:`benchmark_event`,
:func:`progress_events`), shared by the workflow and the scenario's baseline."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ftagent.core.errors import ErrorType, StepFailure
from ftagent.core.trace import Experiment
from ftagent.core.types import EvalResult
from ftagent.engine.events import BenchmarkResult, Progress
from ftagent.finetune.state import FinetuneLoop


def experiment_of(loop: FinetuneLoop) -> Experiment:
    """The trace's record of a finished (or failed) loop, built from its typed state."""
    hyp = loop.hypothesis
    exp = Experiment(loop=loop.index, parent=hyp.parent if hyp else None, hypothesis=hyp, failure=loop.failure)
    if loop.code is not None:
        exp.artefacts.update(loop.code.files)
        exp.artefacts["workspace"] = loop.code.workspace
        exp.plan = dict(loop.code.plan or (hyp.plan if hyp else {}))
    elif hyp is not None:
        exp.plan = dict(hyp.plan)
    if loop.report is not None and loop.report.approved is not None:  # readers use the frozen copies
        exp.approved = loop.report.approved
        exp.artefacts.update(loop.report.approved.artefacts())
    if loop.report is not None:
        exp.system_changes = list(loop.report.changes) or [f"dropped {k}" for k in loop.report.dropped_keys] + [
            f"set {k}" for k in loop.report.injected_keys]
        rows = loop.report.data_stats.get("train_rows")
        exp.data_rows = int(rows) if isinstance(rows, int) else None
    if loop.model is not None:
        exp.artefacts["model"] = loop.model.model_path
        exp.artefacts["output_dir"] = loop.model.output_dir
        if loop.model.adapter_of:  # the weights a LoRA adapter belongs on (a child stage merges it there)
            exp.artefacts["adapter_of"] = loop.model.adapter_of
        exp.config = dict(loop.model.config)
        exp.loss_history = list(loop.model.loss_history)
    if loop.start is not None and loop.start.loop is not None:  # the earlier loop's weights it trained from (the
        exp.artefacts["start_weights"] = loop.start.path       # system's folder: the integrity guard accepts them)
    if loop.samples is not None:  # the start model's answers to training prompts (issue 40)
        exp.artefacts["samples"] = loop.samples.path
        exp.plan["sampling"] = loop.samples.model_dump(exclude={"path", "model"})
    if loop.reward is not None:  # GRPO: the scorer the system passed (export's reproduce/ ships it)
        exp.plan["reward"] = loop.reward.model_dump()
    val, test = loop.scores.validation, loop.scores.test
    exp.eval_configs = {r.split: r.config_sha256 for r in (val, test) if r is not None and r.config_sha256}
    if val is not None:
        exp.val_score, exp.val_metrics, exp.error_samples = val.score, val.metrics, list(val.error_samples)
        exp.val_answers, exp.val_items = val.answers, val.items_file
    if test is not None:
        exp.test_score, exp.test_items = test.score, test.items_file
    if exp.failure is None and exp.val_score is None and loop.model is not None:
        exp.failure = StepFailure(stage="evaluate", error_type=ErrorType.EVAL, message="no validation score")
    return exp


def progress_events(emit: Callable[[Any], None]) -> Callable[[str, int | None, int | None], None]:
    """An evaluator's ``on_progress(phase, done, total)`` as ``progress`` events."""

    def on_progress(phase: str, done: int | None, total: int | None) -> None:
        emit(Progress(phase=phase, done=done, total=total))

    return on_progress


def benchmark_event(res: EvalResult, baseline: bool = False) -> BenchmarkResult:
    """The typed event of one evaluation result."""
    return BenchmarkResult(split=res.split, benchmark=res.benchmark, core_metric=res.core_metric,
                           score=res.score, metrics=res.metrics, error_samples=res.error_samples,
                           cached=res.cached, baseline=baseline)
