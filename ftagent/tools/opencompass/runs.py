"""One OpenCompass run for several splits: prepare, cache, render, run through a Runner, parse.

:func:`evaluate_splits_of_path` evaluates one model folder on several splits of one benchmark in
**one** OpenCompass process: the datasets of every split that is not cached yet go into one config
(named ``<abbr>@<split>``), OpenCompass runs them as one task in-process (one model load, no task
subprocesses), and the results are split afterwards. Each split keeps its own cache entry, keyed as
before (model files, benchmark, split data, inference settings, template version).

With the ``vllm-server`` backend one model server (from the vLLM env, :mod:`.serving`) runs around
all OpenCompass runs of the call and OpenCompass sends it the prompts.

``isolate_tasks=True`` renders the earlier layout instead (one OpenCompass run per split, one
subprocess per (model, dataset) task): the comparison tests and ``make bench`` use it as the
reference the in-process path must match.

The benchmark's prepared folder is :mod:`ftagent.benchmarks.prepared`'s, the model and judge blocks
:mod:`.model_block`'s, one OpenCompass run and the groups of runs :mod:`.run_job`'s.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ftagent.benchmarks.prepared import prepare_benchmark
from ftagent.core.errors import ErrorType, StepError
from ftagent.core.paths import benchmarks_dir, eval_cache_dir
from ftagent.core.types import SplitResults
from ftagent.runners.base import Runner
from ftagent.runners.vllmenv import vllm_env_path
from ftagent.tools.opencompass import cache as cache_mod
from ftagent.tools.opencompass.backend import choose_backend, env_identity, warn_once
from ftagent.tools.opencompass.inference import ANSWER_CAP_RULE, SAMPLING_BACKENDS, InferenceSettings
from ftagent.tools.opencompass.merge import is_lora_adapter, merge_reasons
from ftagent.tools.opencompass.model_block import judge_block, model_spec
from ftagent.tools.opencompass.progress import ProgressCallback, safe_call
from ftagent.tools.opencompass.render import TEMPLATE_VERSION, ModelSpec
from ftagent.tools.opencompass.run_job import EvalJob, WarningCallback, merge_adapter, run_groups
from ftagent.tools.opencompass.serving import (
    Placement,
    ServeCommand,
    VllmServeCommand,
    served_model,
    server_check,
    server_spec,
)
from ftagent.tools.opencompass.weights import weights_problem

if TYPE_CHECKING:
    from ftagent.benchmarks.base import BenchmarkAdapter
    from ftagent.core.settings import Settings

SPLITS = ("validation", "test")
VLLM_LIKE = SAMPLING_BACKENDS  # the vLLM backends share the LoRA merge rule too
KEY_EXCLUDED = {"path", "adapter_path", "tokenizer_path", "api_base", "served_name",  # not the model's behaviour
                "data_parallel_size", "cuda_visible_devices", "port"}


def _data_digest(bench_dir: Path, split: str) -> str:
    h = hashlib.sha256()
    for path in sorted((bench_dir / split).glob("*.jsonl")):
        h.update(path.name.encode() + path.read_bytes())
    return h.hexdigest()


def _refuse_misfit_weights(model: Path, base: Path | None, runner: Runner, work_dir: Path, cache_dir: Path,
                           digest: str, timeout: float | None, on_warning: WarningCallback | None) -> None:
    """Issue 43: weights that do not fit their config.json are never evaluated (:mod:`.weights`)."""
    if is_lora_adapter(model) and base is None:
        return  # an adapter without its base: the merge or the run says so
    problem = weights_problem(model, base, runner, work_dir=work_dir / "weights_check", cache_dir=cache_dir,
                              digest=digest, timeout=min(timeout or 600.0, 600.0), on_warning=on_warning)
    if problem is not None:
        raise StepError(f"the model was not evaluated: {problem}", error_type=ErrorType.EVAL,
                        suggestion="Evaluate a folder whose config.json describes the architecture its weights were "
                                   "saved from (save_pretrained writes both); never edit config.json or the weights "
                                   "by hand", details={"weights_misfit": True})


def evaluate_splits_of_path(
    model_path: Path | str, template: str | None, *, benchmark: BenchmarkAdapter,
    splits: tuple[str, ...] | list[str] = SPLITS, settings: Settings, runner: Runner, work_dir: Path,
    base_path: Path | str | None = None, model_name: str = "", timeout: float | None = None, gpu_count: int = 0,
    on_progress: ProgressCallback | None = None, on_warning: WarningCallback | None = None,
    isolate_tasks: bool = False, serve_command: ServeCommand | None = None,
    inference: InferenceSettings | None = None, sample: int | None = None, items_root: Path | None = None,
    placement: Placement | None = None,
) -> SplitResults:
    """Evaluate one model folder (full model or LoRA adapter of ``base_path``) on ``splits`` in one
    OpenCompass run (cached splits are not run again).

    A failed multi-split run is retried once with the first failed split alone, so that one split's
    failure (e.g. the report-only test split) cannot take the other's result with it; a timeout is
    not retried. ``template`` is the LLaMA-Factory template name (recorded in the cache key only: the
    chat template is read from the model folder, see :mod:`ftagent.tools.opencompass.render`).

    Args:
        benchmark: the resolved benchmark (:attr:`ftagent.finetune.resolve.ResolvedRun.adapter`; a tool or
            test with a key looks it up itself, ``get_benchmark(key)``).
        inference: the model's settings resolved at start-up (default: read models.yaml now).
        on_progress: ``(phase, done, total)``, see :mod:`ftagent.tools.opencompass.progress`.
        on_warning: called with one line when the backend falls back (GPU without vLLM).
        isolate_tasks: the earlier layout: one run per split, one subprocess per task (reference).
        serve_command: the model server's command line for the ``vllm-server`` backend (default:
            vLLM's api_server from the session's vLLM env, ``FT_VLLM_ENV``).
        items_root: a session's frozen copy of its items (:mod:`ftagent.benchmarks.frozen`): evaluate from
            ``items_root/<key>`` and prepare nothing (None: prepare ``FT_FILE_PATH/benchmarks/<key>`` as a
            command without a session does, ``ftagent eval``).
        placement: the model server's GPUs and port (a trial's slot; None: this process's GPUs, a free port).
        sample: cap each split at this many items per sub-dataset (the split rule's seeded first ones,
            :func:`ftagent.benchmarks.splits.split_indices`), prepared in a folder of its own
            (``benchmarks/.sample<n>/<key>``) so the full one is never re-prepared: the forgetting guard.

    Returns:
        :class:`SplitResults`: an :class:`EvalResult` or a :class:`StepFailure` per split.

    Raises:
        StepError(EVAL): the model folder or chat template is missing, a split has no items, or the
            model server did not start.
        StepError(ENV): ``FT_EVAL_BACKEND`` forces a backend that cannot work here.
    """
    start = time.monotonic()
    ft = settings.ft
    key = benchmark.spec.key  # the key names caches and runs from here on
    root, bench_dir, limit = _items_folder(benchmark, ft.file_path, ft.benchmark_limit, sample, items_root)
    model_path = Path(model_path)
    base = Path(base_path) if base_path else None
    is_lora = is_lora_adapter(model_path)
    command = serve_command or VllmServeCommand(vllm_env_path(settings))
    mspec = _model_block(model_path, base, is_lora, settings=settings, runner=runner, command=command,
                         model_name=model_name, gpu_count=gpu_count, abbr=f"ft-{key}", inference=inference,
                         placement=placement, on_warning=on_warning)
    digest = cache_mod.artefact_digest(model_path, base if is_lora else None)
    cache = cache_mod.EvalCache(eval_cache_dir(ft.file_path))
    keys = {split: _cache_key(digest, key, split, bench_dir, limit, template, mspec, settings) for split in splits}
    out = _cached(cache, keys, splits)
    missing = [s for s in splits if s not in out.results]
    if not missing:
        return out
    _refuse_misfit_weights(model_path, base if is_lora else None, runner, Path(work_dir), eval_cache_dir(ft.file_path),
                           digest, timeout, on_warning)
    mspec = _merged_if_needed(mspec, model_path, base, is_lora, runner, Path(work_dir), timeout, on_progress)
    job = EvalJob(benchmark=key, adapter=benchmark, settings=settings, runner=runner, work_dir=Path(work_dir),
                  mspec=mspec, root=root, bench_dir=bench_dir, timeout=timeout, on_progress=on_progress)
    job.on_warning = on_warning
    served_at = time.monotonic()
    with served_model(mspec, command, Path(work_dir), timeout=timeout, on_progress=on_progress) as job.mspec:
        if timeout:  # the server's start used part of the evaluation's time
            job.timeout = max(1.0, timeout - (time.monotonic() - served_at))
        run_groups(job, missing, benchmark.spec, keys, cache, out, start, isolate_tasks)
    safe_call(on_progress, "done")
    if not out.results and out.failures:
        out.require(next(iter(out.failures)))
    return out


def _items_folder(adapter: BenchmarkAdapter, file_path: Path, limit: int | None, sample: int | None,
                  items_root: Path | None) -> tuple[Path, Path, int | None]:
    """Where the evaluation reads its items: ``(root, root/<key>, limit)``. The session's frozen copy
    (``items_root``), else ``FT_FILE_PATH/benchmarks/<key>`` prepared now; ``sample`` caps the limit in a
    folder of its own."""
    key = adapter.spec.key
    root = benchmarks_dir(file_path)
    if sample is not None:
        limit = sample if limit is None else min(limit, sample)
        root = root / f".sample{limit}"  # "." : never a benchmark key
    if items_root is not None and sample is None:  # the session's own copy: never prepared again (issue 39.6)
        bench_dir = Path(items_root) / key
        if not (bench_dir / "validation.jsonl").is_file():
            raise StepError(f"the session's copy of benchmark {key} is missing ({bench_dir})", error_type=ErrorType.EVAL,
                            suggestion="it lives under FT_FILE_PATH/benchmarks/.frozen; start a new session")
        return Path(items_root), bench_dir, limit
    return root, prepare_benchmark(adapter, root, limit), limit


def _model_block(model_path: Path, base: Path | None, is_lora: bool, *, settings: Settings, runner: Runner,
                 command: ServeCommand, model_name: str, gpu_count: int, abbr: str,
                 inference: InferenceSettings | None, placement: Placement | None,
                 on_warning: WarningCallback | None) -> ModelSpec:
    """The model folder checked, the backend chosen (its fallback warned about once) and the model block."""
    if not (model_path / "config.json").exists() and not is_lora:
        raise StepError(f"model folder {model_path} has no config.json or adapter files",
                        error_type=ErrorType.EVAL, suggestion="check that training saved the model")
    choice = choose_backend(gpu_count, runner, forced=settings.ft.eval_backend, server=lambda: server_check(command))
    warn_once(choice, env_identity(runner), on_warning)
    return server_spec(model_spec(model_path, base, model_name, gpu_count, abbr, serve_adapter=is_lora,
                                  backend=choice.backend, device=choice.device, inference=inference),
                       gpu_count, placement)


def _merged_if_needed(mspec: ModelSpec, model_path: Path, base: Path | None, is_lora: bool, runner: Runner,
                      work_dir: Path, timeout: float | None, on_progress: ProgressCallback | None) -> ModelSpec:
    """The model block of the merged model where a vLLM backend cannot serve the LoRA adapter (its rank, DoRA ...)."""
    if is_lora and mspec.backend in VLLM_LIKE and merge_reasons(model_path, backend="vllm",
                                                                 max_lora_rank=mspec.max_lora_rank):
        safe_call(on_progress, "merge")
        merged = merge_adapter(model_path, base, work_dir / "merged_model", runner, timeout)
        return mspec.model_copy(update={"path": str(merged), "adapter_path": None})
    return mspec


def _cache_key(digest: str, key: str, split: str, bench_dir: Path, limit: int | None, template: str | None,
               mspec: ModelSpec, settings: Settings) -> str:
    """A split's cache key: the model files, the benchmark, the split's data and everything that decides its score."""
    ft = settings.ft
    return cache_mod.cache_key(
        digest, key, split,
        {"data": _data_digest(bench_dir, split), "limit": limit, "runs": ft.benchmark_num_runs,
         "pass_k": ft.benchmark_pass_k, "template": template, "answer_caps": ANSWER_CAP_RULE},
        mspec.model_dump(exclude=KEY_EXCLUDED), TEMPLATE_VERSION, judge=judge_block(settings))


def _cached(cache: cache_mod.EvalCache, keys: dict[str, str], splits: tuple[str, ...] | list[str]) -> SplitResults:
    """The splits whose result is in the cache."""
    out = SplitResults()
    for split in splits:
        hit = cache.get(keys[split])
        if hit is not None and hit.config_sha256:  # an entry of an older ftagent says not what it was scored with
            out.results[split] = hit
    return out
