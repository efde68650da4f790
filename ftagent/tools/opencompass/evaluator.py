"""OpenCompass evaluation entry points (the run itself is :mod:`ftagent.tools.opencompass.runs`).

* :class:`OpenCompassEvaluator` — the loop's evaluate step: :meth:`~OpenCompassEvaluator.evaluate_splits`
  (validation and test in one OpenCompass run) and the per-split :meth:`~OpenCompassEvaluator.evaluate`
  of the :class:`~ftagent.finetune.protocols.Evaluator` protocol;
* :func:`evaluate_model_path` — one split of any model folder (e.g. the base model);
* :func:`evaluate_baseline` — validation + test of the base model in one run; any failure is one
  :class:`BaselineEvaluationError` (an :class:`EnvironmentFailure`: the session cannot judge loops).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ftagent.core.errors import EnvironmentFailure, StepError, StepFailure
from ftagent.core.paths import baseline_dir
from ftagent.core.types import EvalResult, SplitResults, TrainResult
from ftagent.runners.base import Runner
from ftagent.tools.opencompass.inference import InferenceSettings
from ftagent.tools.opencompass.progress import ProgressCallback
from ftagent.tools.opencompass.run_job import WarningCallback
from ftagent.tools.opencompass.runs import SPLITS, evaluate_splits_of_path
from ftagent.tools.opencompass.serving import Placement, ServeCommand

if TYPE_CHECKING:
    from ftagent.benchmarks.base import BenchmarkAdapter
    from ftagent.core.settings import Settings
    from ftagent.core.types import ScenarioInfo
    from ftagent.engine.loop import StepContext
    from ftagent.engine.session import SessionState

__all__ = ["BaselineEvaluationError", "OpenCompassEvaluator", "evaluate_baseline", "evaluate_model_path"]


class BaselineEvaluationError(EnvironmentFailure):
    """The base model could not be evaluated: no loop can be judged, the session stops with this
    one message (``failure`` holds the structured form, with the OpenCompass log tail)."""

    def __init__(self, message: str, failure: StepFailure) -> None:
        super().__init__(message)
        self.failure = failure


def evaluate_model_path(
    model_path: Path | str, template: str | None, *, benchmark: BenchmarkAdapter, split: str, settings: Settings,
    runner: Runner, work_dir: Path, base_path: Path | str | None = None, model_name: str = "",
    timeout: float | None = None, gpu_count: int = 0, on_progress: ProgressCallback | None = None,
    on_warning: WarningCallback | None = None, isolate_tasks: bool = False, serve_command: ServeCommand | None = None,
) -> EvalResult:
    """Evaluate one model folder (full model or LoRA adapter of ``base_path``) on one split.

    Raises:
        StepError(EVAL): OpenCompass failed (with the lines of its log).
    """
    return evaluate_splits_of_path(
        model_path, template, benchmark=benchmark, splits=(split,), settings=settings, runner=runner,
        work_dir=work_dir, base_path=base_path, model_name=model_name, timeout=timeout, gpu_count=gpu_count,
        on_progress=on_progress, on_warning=on_warning, isolate_tasks=isolate_tasks, serve_command=serve_command,
    ).require(split)


def _gpu_count(scenario: ScenarioInfo) -> int:
    return scenario.hardware.gpu_count


def _placement(scenario: ScenarioInfo) -> Placement | None:
    """A trial's slot (K trials at once): its model server on the slot's GPUs and port."""
    slot = getattr(scenario, "slot", None)  # a scenario without slots (a plug-in's, a test's) has none
    if slot is None:
        return None
    return Placement(gpus=scenario.hardware.cuda_visible_devices if slot.gpus else None, port=slot.vllm_port)


class OpenCompassEvaluator:
    """The evaluate step: OpenCompass through the session's runner (``tool="eval"``).

    ``run`` is the start-up's :class:`ftagent.finetune.resolve.ResolvedRun` (required: the class declares
    ``reads_resolved_run``, :mod:`ftagent.finetune.protocols`): its benchmark (``run.adapter``) and the
    model's inference settings (``run.model.inference``) are taken once here, so that no evaluation looks
    the benchmark up or reads models.yaml again.
    """

    reads_resolved_run = True

    def __init__(self, scenario: ScenarioInfo, settings: Settings, runner: Runner, *, run: Any) -> None:
        self.scenario = scenario
        self.settings = settings
        self.runner = runner
        self.benchmark: BenchmarkAdapter = run.adapter
        self.inference: InferenceSettings = run.model.inference

    def evaluate_splits(self, model: TrainResult, ctx: StepContext[SessionState], splits: tuple[str, ...] = SPLITS, *,
                        on_progress: ProgressCallback | None = None) -> SplitResults:
        """Evaluate a trained model on ``splits`` in one OpenCompass run.

        Validation is for the agent; the test result goes to the report/UI/events only. A failing
        split is a :class:`StepFailure` in ``.failures`` (``.require(split)`` raises it), so a test
        failure never takes the validation result with it.
        """
        out = evaluate_splits_of_path(
            model.model_path, model.template, benchmark=self.benchmark, splits=splits, settings=self.settings,
            runner=self.runner, work_dir=Path(model.output_dir) / "oc",
            base_path=model.adapter_of, model_name=self.scenario.base_model,
            timeout=ctx.limit(self.settings.ft.benchmark_timeout_s), gpu_count=_gpu_count(self.scenario),
            on_progress=on_progress, on_warning=_warner(ctx), inference=self.inference,
            items_root=self.scenario.items_root(), placement=_placement(self.scenario),
        )
        return _planner_view(out, self.scenario)

    def evaluate(self, model: TrainResult, split: str, ctx: StepContext[SessionState]) -> EvalResult:
        """One split (the :class:`~ftagent.finetune.protocols.Evaluator` protocol)."""
        return self.evaluate_splits(model, ctx, (split,)).require(split)


def _warner(ctx: object) -> WarningCallback | None:
    emit = getattr(ctx, "emit", None)
    if emit is None:
        return None
    from ftagent.engine.events import Message

    return lambda text: emit(Message(level="warning", text=text))


def evaluate_baseline(scenario: ScenarioInfo, settings: Settings, runner: Runner, timeout: float | None = None,
                      *, on_progress: ProgressCallback | None = None, on_warning: WarningCallback | None = None,
                      benchmark: BenchmarkAdapter,
                      inference: InferenceSettings) -> dict[str, EvalResult]:
    """Validation and test scores of the base model, in one OpenCompass run (each split cached by
    model files, benchmark, ranges and inference settings). ``benchmark``/``inference``: the session's
    resolved ones (required: nothing is looked up again).

    Raises:
        BaselineEvaluationError: any failure (OpenCompass, the runner, a missing model, no score).
    """
    work = baseline_dir(settings.ft.file_path, scenario.benchmark)
    what = f"the baseline evaluation of {scenario.base_model} on {scenario.benchmark}"
    try:
        out = evaluate_splits_of_path(
            scenario.base_model_path, None, benchmark=benchmark,
            splits=SPLITS, settings=settings, runner=runner, work_dir=work, model_name=scenario.base_model, timeout=timeout,
            gpu_count=_gpu_count(scenario), on_progress=on_progress, on_warning=on_warning, inference=inference,
            items_root=scenario.items_root())
        results = {split: out.require(split) for split in SPLITS}
    except StepError as exc:
        failure = exc.to_failure("baseline")
        raise BaselineEvaluationError(_baseline_message(what, failure), failure) from exc
    except Exception as exc:  # noqa: BLE001 - a baseline crash must be one clear error, not a traceback
        failure = StepFailure(stage="baseline", message=f"{type(exc).__name__}: {exc}")
        raise BaselineEvaluationError(_baseline_message(what, failure), failure) from exc
    results = _planner_view(SplitResults(results=results), scenario).results
    if results["validation"].score is None:
        failure = StepFailure(stage="baseline", message="no validation score (core metric missing from the "
                              f"results in {results['validation'].run_dir})")
        raise BaselineEvaluationError(_baseline_message(what, failure), failure)
    return results


def _planner_view(out: SplitResults, scenario: ScenarioInfo) -> SplitResults:
    """The validation result's item-level parts (error samples, answer profile) from validation's feedback
    part only, in a session that splits validation (issue 39 item 5: the planner reads them)."""
    holdout = getattr(scenario, "holdout", None)
    if holdout is not None and "validation" in out.results:
        from ftagent.tools.opencompass.feedback_view import feedback_only

        out.results["validation"] = feedback_only(out.results["validation"], holdout)
    return out


def _baseline_message(what: str, failure: StepFailure, tail_lines: int = 15) -> str:
    lines = [f"{what} failed, so no loop can be judged: {failure.message}"]
    if failure.suggestion:
        lines.append(f"suggestion: {failure.suggestion}")
    tail = [ln for ln in failure.log_tail.splitlines() if ln.strip()][-tail_lines:]
    if tail:
        lines += ["last lines of the OpenCompass log:"] + ["  " + ln for ln in tail]
    return "\n".join(lines)
