"""OpenCompass evaluation: prepare data, render the config, run it through a Runner, parse, cache.

Entry points: :class:`OpenCompassEvaluator` (the loop's evaluate step), :func:`evaluate_model_path`
(any model folder, e.g. the base model) and :func:`evaluate_baseline` (validation + test of the base).
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ftagent.benchmarks import get_benchmark
from ftagent.core.errors import ErrorType, StepError
from ftagent.core.paths import package_root
from ftagent.core.types import EvalResult, TrainResult
from ftagent.runners.base import Mount, Runner
from ftagent.tools.opencompass import cache as cache_mod
from ftagent.tools.opencompass import parse
from ftagent.tools.opencompass.inference import inference_config
from ftagent.tools.opencompass.merge import is_lora_adapter, merge_command, merge_reasons
from ftagent.tools.opencompass.render import TEMPLATE_VERSION, ModelSpec, render_config, template_folder

if TYPE_CHECKING:
    from ftagent.core.settings import Settings
    from ftagent.core.types import ScenarioInfo
    from ftagent.engine.loop import StepContext

PACKAGE_ROOT = package_root()  # puts ftagent.tools.opencompass.oc_ext on PYTHONPATH
SPLITS = ("validation", "test")


def prepare_benchmark(key: str, root: Path, limit: int | None) -> Path:
    """Prepare ``root/<key>`` once per ``limit`` (a marker records the limit used)."""
    adapter = get_benchmark(key)
    out = Path(root) / key
    marker = out / "prepared.json"
    if marker.exists() and json.loads(marker.read_text()).get("limit") == limit:
        return out
    adapter.prepare(root, limit=limit)
    marker.write_text(json.dumps({"limit": limit}), encoding="utf-8")
    return out


def _data_digest(bench_dir: Path, split: str) -> str:
    h = hashlib.sha256()
    for path in sorted((bench_dir / split).glob("*.jsonl")):
        h.update(path.name.encode() + path.read_bytes())
    return h.hexdigest()


def _log_lines(run: Path | None, limit: int = 60) -> str:
    if run is None:
        return ""
    lines: list[str] = []
    for log in sorted(run.glob("logs/*/**/*.out")):
        text = log.read_text(encoding="utf-8", errors="replace").splitlines()
        lines += [f"== {log.relative_to(run)}"] + text[-limit:]
    return "\n".join(lines[-3 * limit:])


def _judge(settings: Settings) -> dict[str, str] | None:
    ft = settings.ft
    if ft.judge_api_key is None or not ft.judge_model:
        return None
    return {"model": ft.judge_model, "key_env": "ENV", "api_base": ft.judge_api_base or ""}


def _model_spec(model_path: Path, base_path: Path | None, model_name: str, gpu_count: int,
                abbr: str, serve_adapter: bool) -> ModelSpec:
    inf = inference_config(model_name, gpu_count)
    backend = "vllm" if gpu_count > 0 else "hf"
    adapter = model_path if serve_adapter else None
    full = base_path if serve_adapter else model_path
    return ModelSpec(
        backend=backend, abbr=abbr, path=str(Path(full).resolve()),
        adapter_path=str(Path(adapter).resolve()) if adapter else None,
        tokenizer_path=str(template_folder(model_path, base_path)),
        max_seq_len=int(inf["max_seq_len"]), max_out_len=int(inf["max_out_len"]),
        batch_size=int(inf["batch_size"] if backend == "vllm" else inf.get("cpu_batch_size", 8)),
        temperature=float(inf["temperature"]), top_p=float(inf["top_p"]), top_k=int(inf["top_k"]),
        do_sample=float(inf["temperature"]) > 0 and backend == "vllm",
        tensor_parallel_size=int(inf["tensor_parallel_size"]),
        gpu_memory_utilization=float(inf["gpu_memory_utilization"]), dtype=str(inf["dtype"]),
        max_lora_rank=int(inf.get("max_lora_rank", 64)), enable_thinking=bool(inf["enable_thinking"]),
    )


def evaluate_model_path(
    model_path: Path | str, template: str | None, *, benchmark: str, split: str, settings: Settings,
    runner: Runner, work_dir: Path, base_path: Path | str | None = None, model_name: str = "",
    timeout: float | None = None, gpu_count: int = 0,
) -> EvalResult:
    """Evaluate one model folder (full model or LoRA adapter of ``base_path``) on one split.

    ``template`` is the LLaMA-Factory template name used in training (recorded only: the chat template
    itself is read from the model folder's tokenizer files, see :mod:`ftagent.tools.opencompass.render`).

    Raises:
        StepError(EVAL): OpenCompass failed (with the lines of its infer/eval logs).
    """
    start = time.monotonic()
    ft = settings.ft
    adapter = get_benchmark(benchmark)
    spec = adapter.spec
    root = Path(ft.file_path) / "benchmarks"
    bench_dir = prepare_benchmark(benchmark, root, ft.benchmark_limit)
    model_path = Path(model_path)
    if not (model_path / "config.json").exists() and not is_lora_adapter(model_path):
        raise StepError(f"model folder {model_path} has no config.json or adapter files",
                        error_type=ErrorType.EVAL, suggestion="check that training saved the model")
    base = Path(base_path) if base_path else None
    is_lora = is_lora_adapter(model_path)
    mspec = _model_spec(model_path, base, model_name, gpu_count, f"ft-{benchmark}", serve_adapter=is_lora)
    work_dir = Path(work_dir)
    key = cache_mod.cache_key(
        cache_mod.artefact_digest(model_path, base if is_lora else None), benchmark, split,
        {"data": _data_digest(bench_dir, split), "limit": ft.benchmark_limit, "runs": ft.benchmark_num_runs,
         "pass_k": ft.benchmark_pass_k, "template": template},
        mspec.model_dump(exclude={"path", "adapter_path", "tokenizer_path"}), TEMPLATE_VERSION)
    cache = cache_mod.EvalCache(Path(ft.file_path) / "eval_cache")
    hit = cache.get(key)
    if hit is not None:
        return hit
    if is_lora and mspec.backend == "vllm" and merge_reasons(model_path, backend="vllm",
                                                              max_lora_rank=mspec.max_lora_rank):
        merged = _merge(model_path, base, work_dir / "merged_model", runner, timeout)
        mspec = mspec.model_copy(update={"path": str(merged), "adapter_path": None})
    blocks = adapter.dataset_blocks(root, split, judge=_judge(settings))  # type: ignore[arg-type]
    if not blocks:
        raise StepError(f"benchmark {benchmark} has no {split} items", error_type=ErrorType.EVAL)
    for b in blocks:
        b.max_out_len = min(b.max_out_len, mspec.max_out_len)
    source = render_config(blocks, mspec, benchmark=benchmark, split=split, num_runs=ft.benchmark_num_runs,
                           pass_k=ft.benchmark_pass_k)
    work_dir.mkdir(parents=True, exist_ok=True)
    cfg = work_dir / f"oc_{split}.py"
    cfg.write_text(source, encoding="utf-8")
    out_dir = work_dir / "eval" / split
    env = {"PYTHONPATH": str(PACKAGE_ROOT), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1"}
    if ft.judge_api_key is not None:
        env["OPENAI_API_KEY"] = ft.judge_api_key.get_secret_value()
    mounts = [Mount(source=bench_dir), Mount(source=PACKAGE_ROOT / "ftagent"),
              Mount(source=Path(mspec.path)), Mount(source=work_dir, read_only=False)]
    if mspec.adapter_path:
        mounts.append(Mount(source=Path(mspec.adapter_path)))
    res = runner.run(["opencompass", str(cfg), "--work-dir", str(out_dir)], tool="eval", workdir=work_dir,
                     env=env, mounts=mounts, timeout=timeout, log_file=work_dir / f"opencompass_{split}.log")
    run = parse.latest_run(out_dir)
    reason = "timed out" if res.timed_out else parse.failure_reason(run)
    if reason:
        raise StepError(f"OpenCompass evaluation of {benchmark}/{split} failed: {reason}",
                        error_type=ErrorType.TIMEOUT if res.timed_out else ErrorType.EVAL,
                        log_tail=_log_lines(run) or res.log_tail, details={"run_dir": str(run)})
    assert run is not None
    metrics = parse.read_metrics(run)
    result = EvalResult(benchmark=benchmark, split=split, core_metric=spec.core_metric,  # type: ignore[arg-type]
                        direction=spec.direction, score=parse.core_score(metrics, spec.core_metric),
                        metrics=metrics, error_samples=parse.error_samples(run), run_dir=str(run),
                        duration_s=time.monotonic() - start)
    cache.put(key, result)
    return result


def _merge(adapter: Path, base: Path | None, out: Path, runner: Runner, timeout: float | None) -> Path:
    if base is None:
        raise StepError("LoRA adapter without a base model path", error_type=ErrorType.EVAL)
    if (out / "config.json").exists():
        return out
    res = runner.run(merge_command(base, adapter, out), tool="eval", workdir=out.parent,
                     mounts=[Mount(source=base), Mount(source=adapter), Mount(source=out.parent, read_only=False)],
                     timeout=timeout, log_file=out.parent / "merge.log")
    if not res.ok:
        raise StepError("merging the LoRA adapter failed", error_type=ErrorType.EVAL, log_tail=res.log_tail)
    return out


def _gpu_count(scenario: ScenarioInfo) -> int:
    hw = scenario.hardware or {}
    gpus = hw.get("gpus")
    return int(hw.get("gpu_count", len(gpus) if isinstance(gpus, list) else 0) or 0)


class OpenCompassEvaluator:
    """The evaluate step: OpenCompass through the session's runner (``tool="eval"``)."""

    def __init__(self, scenario: ScenarioInfo, settings: Settings, runner: Runner | None = None) -> None:
        self.scenario = scenario
        self.settings = settings
        if runner is None:
            from ftagent.runners.factory import get_runner

            runner = get_runner(settings)
        self.runner = runner

    def evaluate(self, model: TrainResult, scenario: ScenarioInfo, split: str, ctx: StepContext) -> EvalResult:
        """Evaluate a trained model on ``split``; validation is for the agent, test for reports only."""
        result = evaluate_model_path(
            model.model_path, model.template, benchmark=scenario.benchmark, split=split,
            settings=self.settings, runner=self.runner, work_dir=Path(model.output_dir) / "oc",
            base_path=model.adapter_of, model_name=scenario.base_model,
            timeout=ctx.limit(self.settings.ft.benchmark_timeout_s), gpu_count=_gpu_count(scenario),
        )
        return result  # the workflow emits the BenchmarkResult event


def evaluate_baseline(scenario: ScenarioInfo, settings: Settings, runner: Runner,
                      timeout: float | None = None) -> dict[str, EvalResult]:
    """Validation and test scores of the base model (cached by model files, benchmark, ranges, settings)."""
    work = Path(settings.ft.file_path) / "baseline" / scenario.benchmark
    return {split: evaluate_model_path(
        scenario.base_model_path, None, benchmark=scenario.benchmark, split=split, settings=settings,
        runner=runner, work_dir=work, model_name=scenario.base_model, timeout=timeout,
        gpu_count=_gpu_count(scenario)) for split in SPLITS}


def as_dict(results: dict[str, EvalResult]) -> dict[str, Any]:
    """``{split: EvalResult as dict}`` for ``ScenarioInfo.baseline``."""
    return {k: v.model_dump() for k, v in results.items()}
