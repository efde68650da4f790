"""The forgetting guard (issue 31 item 6): a candidate that lost what the base model could do elsewhere
does not become SOTA.

``FT_GUARD_BENCHMARKS`` names benchmarks other than the target (none by default; for real runs
docs/benchmarks.md suggests ``mmlu,gsm8k,humaneval``). Each is scored on ``FT_GUARD_SAMPLE`` items per
sub-dataset — the seeded first items of its validation split, prepared in a folder of their own
(``evaluate_splits_of_path(..., sample=n)``) — with the evaluation the baseline uses:

* the base model once, when the first candidate needs it (the evaluation cache keeps it across sessions,
  like the baseline: same model files, benchmark, sample and inference settings);
* each candidate that would become SOTA by the target score (the workflow's feedback step asks only
  then, so a loop that loses anyway costs nothing more).

:func:`ftagent.core.forgetting_rule.judge_drop` decides each difference; a blocked one sets
``Experiment.forgetting`` and :func:`ftagent.core.sota.decide_sota` keeps the candidate from SOTA.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ftagent.core.errors import StepError, UserInputError
from ftagent.core.forgetting_rule import GuardResult, judge_drop
from ftagent.core.paths import baseline_dir
from ftagent.core.stats import load_items, paired_bootstrap
from ftagent.core.types import EvalResult, ScenarioInfo, TrainResult

if TYPE_CHECKING:
    from ftagent.benchmarks.base import BenchmarkAdapter
    from ftagent.tools.opencompass.inference import InferenceSettings

GUARD_SPLIT = "validation"  # the guard benchmark's own validation split: the agent never sees it either


def guard_adapters(keys: list[str], target: str) -> list[BenchmarkAdapter]:
    """The guard benchmarks' adapters; an unknown key, or the target itself, is a UserInputError (exit 2)."""
    from ftagent.benchmarks import get_benchmark

    out = []
    for key in dict.fromkeys(k.strip() for k in keys if k.strip()):
        if key == target:
            raise UserInputError(f"FT_GUARD_BENCHMARKS names the target benchmark {key!r}: the guard scores "
                              "other benchmarks (the target is already scored every loop)")
        try:
            out.append(get_benchmark(key))
        except UserInputError as exc:
            raise UserInputError(f"FT_GUARD_BENCHMARKS: {exc}") from exc
    return out


def guard_items(settings: Any, target: str, assumptions: list[str] | None = None) -> list[int]:
    """Items one guard evaluation scores per guard benchmark (``FT_GUARD_SAMPLE`` × its sub-datasets, at
    most), for the forecast (:func:`ftagent.core.forecast_arithmetic.build_forecast`); said in ``assumptions``."""
    keys = list(getattr(settings.ft, "guard_benchmarks", None) or [])
    if not keys:
        return []
    sample = int(settings.ft.guard_sample)
    items = {a.spec.key: sample * max(1, len(a.spec.subsets)) for a in guard_adapters(keys, target)}
    if assumptions is not None:
        assumptions.append(
            "the forgetting guard (FT_GUARD_BENCHMARKS) adds one evaluation per guard benchmark to each loop's "
            f"evaluate time ({', '.join(f'{k}: {n} items' for k, n in items.items())}; at the target's measured "
            "speed) and one more each in loop 0 for the base model: an upper bound, as only a candidate that "
            "would become SOTA is scored (in the feedback step) and the base's scores may be cached")
    return list(items.values())


class ForgettingGuard:
    """Scores the guard benchmarks for the base model (once) and for a candidate, and judges the drop."""

    def __init__(self, scenario: ScenarioInfo, settings: Any, runner: Any, *, adapters: list[BenchmarkAdapter],
                 inference: InferenceSettings) -> None:
        """``inference``: the base model's models.yaml settings as the start-up resolved them (required:
        the guard's evaluations are the session's, nothing is read again)."""
        self.scenario, self.settings, self.runner = scenario, settings, runner
        self.adapters, self.inference = adapters, inference
        self.sample = int(settings.ft.guard_sample)
        self.max_drop = float(settings.ft.guard_max_drop)
        self._base: dict[str, EvalResult | str] = {}  # per key: the base's result, or why it failed

    @property
    def timeout_s(self) -> float:
        return float(self.settings.ft.benchmark_timeout_s)

    @property
    def keys(self) -> list[str]:
        return [a.spec.key for a in self.adapters]

    def _evaluate(self, adapter: BenchmarkAdapter, model_path: str | Path, template: str | None, *,
                  base_path: str | None, work_dir: Path, timeout: float | None) -> EvalResult:
        from ftagent.tools.opencompass.runs import evaluate_splits_of_path

        return evaluate_splits_of_path(
            model_path, template, benchmark=adapter, splits=(GUARD_SPLIT,), settings=self.settings,
            runner=self.runner, work_dir=work_dir, base_path=base_path, model_name=self.scenario.base_model,
            timeout=timeout, gpu_count=self.scenario.hardware.gpu_count, inference=self.inference,
            sample=self.sample).require(GUARD_SPLIT)

    def base(self, adapter: BenchmarkAdapter, timeout: float | None = None) -> EvalResult | str:
        """The base model's guard score on ``adapter`` (evaluated once; a failure is kept as its text)."""
        key = adapter.spec.key
        if key not in self._base:
            work = baseline_dir(self.settings.ft.file_path, key) / f"guard{self.sample}"
            try:
                self._base[key] = self._evaluate(adapter, self.scenario.base_model_path, None, base_path=None,
                                                 work_dir=work, timeout=timeout)
            except StepError as exc:
                self._base[key] = f"the base model's guard evaluation failed: {exc}"
        return self._base[key]

    def check(self, model: TrainResult, timeout: float | None = None) -> list[GuardResult]:
        """Every guard benchmark's verdict on ``model`` (a failed evaluation: not judged, not blocking)."""
        out = []
        for adapter in self.adapters:
            key, spec = adapter.spec.key, adapter.spec
            metric = spec.core_metric or ""
            base = self.base(adapter, timeout)
            if isinstance(base, str):
                out.append(GuardResult(benchmark=key, core_metric=metric, error=base, text=f"{key}: not judged: {base}"))
                continue
            try:
                cand = self._evaluate(adapter, model.model_path, model.template, base_path=model.adapter_of,
                                      work_dir=Path(model.output_dir) / "guard" / key, timeout=timeout)
            except StepError as exc:
                why = f"the candidate's guard evaluation failed: {exc}"
                out.append(GuardResult(benchmark=key, core_metric=base.core_metric, base_score=base.score,
                                       error=why, text=f"{key}: not judged: {why}"))
                continue
            out.append(compare(key, cand, base, max_drop=self.max_drop, direction=spec.direction))
        return out


def compare(key: str, cand: EvalResult, base: EvalResult, *, max_drop: float, direction: str = "max"
            ) -> GuardResult:
    """The paired difference candidate − base on one guard benchmark, judged by :func:`judge_drop`."""
    diff = None if cand.score is None or base.score is None else cand.score - base.score
    d = paired_bootstrap(load_items(cand.items_file), load_items(base.items_file), against="base", split="guard",
                         reference_name="the base model", diff=diff)
    res = judge_drop(key, d, max_drop=max_drop, direction=direction, core_metric=cand.core_metric)
    return res.model_copy(update={"base_score": base.score, "candidate_score": cand.score})
