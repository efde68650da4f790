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
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ftagent.core.disk import check_disk_full
from ftagent.core.errors import ErrorType, StepError
from ftagent.core.paths import benchmarks_dir, eval_cache_dir, package_root
from ftagent.core.types import EvalResult, SplitResults
from ftagent.integrity.eval_config import split_digests
from ftagent.runners.base import Mount, Runner
from ftagent.runners.scrubbed import run_scrubbed
from ftagent.runners.vllmenv import vllm_env_path
from ftagent.tools.opencompass import cache as cache_mod
from ftagent.tools.opencompass import parse
from ftagent.tools.opencompass.backend import choose_backend, env_identity, warn_once
from ftagent.tools.opencompass.inference import (
    ANSWER_CAP_RULE,
    SAMPLING_BACKENDS,
    InferenceSettings,
    answer_token_limit,
    inference_config,
    read_model_config,
    samples,
)
from ftagent.tools.opencompass.items import write_item_scores
from ftagent.tools.opencompass.judge import judge_run_env
from ftagent.tools.opencompass.merge import is_lora_adapter, merge_command, merge_reasons
from ftagent.tools.opencompass.progress import (
    DatasetInfo,
    LogFollower,
    ProgressCallback,
    ProgressTracker,
    safe_call,
)
from ftagent.tools.opencompass.render import TEMPLATE_VERSION, ModelSpec, render_config, template_folder
from ftagent.tools.opencompass.serving import (
    Placement,
    ServeCommand,
    VllmServeCommand,
    served_model,
    server_check,
    server_spec,
)
from ftagent.tools.opencompass.timeouts import unresolved_timeouts, unresolved_warnings
from ftagent.tools.opencompass.weights import weights_problem

if TYPE_CHECKING:
    from ftagent.benchmarks.base import BenchmarkAdapter, DatasetBlock
    from ftagent.benchmarks.checked import CheckedItems
    from ftagent.core.settings import Settings

PACKAGE_ROOT = package_root()  # puts ftagent.tools.opencompass.oc_ext on PYTHONPATH
SPLITS = ("validation", "test")
VLLM_LIKE = SAMPLING_BACKENDS  # the vLLM backends share the LoRA merge rule too
KEY_EXCLUDED = {"path", "adapter_path", "tokenizer_path", "api_base", "served_name",  # not the model's behaviour
                "data_parallel_size", "cuda_visible_devices", "port"}
WarningCallback = Callable[[str], None]
# the judge's "reply" when the gateway answers 402: neither A nor CORRECT, so the item keeps its rule score
JUDGE_BUDGET_NOTE = "not judged: the session's llm budget is spent"


def _prepare_lock(root: Path, key: str):
    """One preparation of ``root/<key>`` at a time across processes (sessions, ``ftagent eval``)."""
    from filelock import FileLock

    Path(root).mkdir(parents=True, exist_ok=True)
    return FileLock(str(Path(root) / f".{key}.prepare.lock"), timeout=6 * 3600)


def _prepare(adapter: BenchmarkAdapter, root: Path, limit: int | None, items: CheckedItems | None) -> Path:
    """Prepare ``root/<key>`` unless current. A benchmark of local files is prepared from its rows: ``items``,
    the ones start-up checked (read once), else read now -- a folder written from other rows is prepared again."""
    from ftagent.benchmarks.checked import ChecksData

    key = adapter.spec.key
    out = Path(root) / key
    if isinstance(adapter, ChecksData):
        items = items if items is not None else adapter.check_data(root, limit)
        digest = items.digest if items is not None else None
        if is_prepared(root, key, limit, items=digest):
            return out
        adapter.prepare(root, limit=limit, items=items)
    else:
        digest = None
        if is_prepared(root, key, limit):
            return out
        adapter.prepare(root, limit=limit)
    (out / "prepared.json").write_text(json.dumps(_wanted(limit, digest)), encoding="utf-8")
    return out


def prepare_benchmark(adapter: BenchmarkAdapter, root: Path, limit: int | None) -> Path:
    """Prepare ``root/<key>`` once per ``limit``, split rule and scoring rules (a marker records them).

    ``adapter``: the resolved benchmark (the session's, from start-up; a tool looks its key up itself).
    """
    with _prepare_lock(root, adapter.spec.key):
        return _prepare(adapter, root, limit, None)


def prepare_session_copy(adapter: BenchmarkAdapter, root: Path, limit: int | None,
                         items: CheckedItems | None) -> tuple[Path, str]:
    """Prepare ``root/<key>`` and freeze it as the session's own copy (:mod:`ftagent.benchmarks.frozen`), under
    the preparation lock, so no other command's preparation can interleave with the copy. ``items``: the rows
    start-up read and checked (:attr:`ResolvedRun.checked_items`; None: none were read).

    Returns:
        ``(frozen root, content digest)``.
    """
    from ftagent.benchmarks.frozen import freeze

    with _prepare_lock(root, adapter.spec.key):
        _prepare(adapter, root, limit, items)
        return freeze(root, adapter.spec.key)


def _wanted(limit: int | None, items: str | None = None) -> dict:
    from ftagent.benchmarks.base import PREPARED_SPLITS
    from ftagent.benchmarks.components import SCORING_VERSION
    from ftagent.benchmarks.splits import SPLIT_VERSION

    wanted = {"limit": limit, "split_rule": SPLIT_VERSION, "scoring": SCORING_VERSION, "splits": list(PREPARED_SPLITS)}
    return wanted | ({"items": items} if items is not None else {})


def is_prepared(root: Path, key: str, limit: int | None, *, items: str | None = None) -> bool:
    """``root/<key>`` holds what :func:`prepare_benchmark` would write now (reading only).

    A folder split by an older rule, or whose golds older scoring rules wrote, is prepared again ... and a
    folder without the final evaluation's "full" split too; with ``items`` (a :class:`CheckedItems` digest),
    one written from other rows.
    """
    marker = Path(root) / key / "prepared.json"
    try:
        found = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if items is None and isinstance(found, dict):
        found.pop("items", None)
    return bool(found == _wanted(limit, items))


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


def _judge(settings: Settings, *, routed: bool = False) -> dict[str, str] | None:
    """The LLM judge's settings: the real model/base/retries (the cache key's part; never the key),
    or with ``routed`` the block OpenCompass gets: the session's judge gateway (``settings.judge_route``,
    URL + token, see :meth:`ftagent.llm.gateway.LLMGateway.for_judge`) in place of the real base."""
    ft = settings.ft
    if ft.judge_api_key is None or not ft.judge_model:
        return None
    judge = {"model": ft.judge_model, "key_env": "ENV", "api_base": ft.judge_api_base or "",
             "retry": str(ft.judge_retry)}
    route = getattr(settings, "judge_route", None)
    if routed and route is not None:
        judge["api_base"] = route.url.rstrip("/") + "/"
        judge["on_budget_spent"] = JUDGE_BUDGET_NOTE  # HTTP 402: this reply, not retries and a crash
    return judge


def model_spec(model_path: Path, base_path: Path | None, model_name: str, gpu_count: int, abbr: str,
               serve_adapter: bool, backend: str = "hf", device: str = "cpu",
               inference: InferenceSettings | None = None) -> ModelSpec:
    """The model block: inference settings of ``model_name`` (``inference``, else models.yaml) on
    ``backend``/``device``."""
    adapter = model_path if serve_adapter else None
    full = base_path if serve_adapter else model_path
    # TP and max_model_len follow the served model's own config.json (vllm_rules, issue 30)
    memory_gb, capability, gpu_name = _gpu_facts(gpu_count)
    inf = inference_config(model_name, gpu_count, inference=inference, model_config=read_model_config(full),
                           per_gpu_memory_gb=memory_gb, compute_capability=capability, gpu_name=gpu_name)
    cpu = backend == "hf" and device == "cpu"
    return ModelSpec(
        backend=backend, device=device, abbr=abbr, path=str(Path(full).resolve()),  # type: ignore[arg-type]
        adapter_path=str(Path(adapter).resolve()) if adapter else None,
        tokenizer_path=str(template_folder(model_path, base_path)),
        max_seq_len=int(inf["max_seq_len"]), max_out_len=int(inf["max_out_len"]),
        batch_size=int(inf.get("cpu_batch_size", 8) if cpu else inf["batch_size"]),
        temperature=float(inf["temperature"]), top_p=float(inf["top_p"]), top_k=int(inf["top_k"]),
        do_sample=samples(inf["temperature"], backend),
        tensor_parallel_size=int(inf["tensor_parallel_size"]),
        gpu_memory_utilization=float(inf["gpu_memory_utilization"]), dtype=str(inf["dtype"]),
        max_lora_rank=int(inf.get("max_lora_rank", 64)), enable_thinking=bool(inf["enable_thinking"]),
    )


def _gpu_facts(gpu_count: int) -> tuple[float, tuple[int, int] | None, str]:
    """GB per GPU (TP choice, KV cache), compute capability (vLLM dtype) and the GPU's name (vLLM's batch
    defaults) from NVML; (0, None, "") without GPUs."""
    if gpu_count <= 0:
        return 0.0, None, ""
    from ftagent.core.hardware import detect_gpus
    from ftagent.tools.launch.profiles import profile_of

    profile = profile_of(detect_gpus())
    return profile.memory_gb, profile.compute_capability if profile.gpu_count else None, profile.gpu_name


def _count_rows(path: str) -> int:
    try:
        with open(path, encoding="utf-8") as fh:
            return sum(1 for line in fh if line.strip())
    except OSError:
        return 0


class _Job:
    """Everything one evaluation call shares between its runs."""

    def __init__(self, *, benchmark: str, adapter: BenchmarkAdapter, settings: Settings, runner: Runner,
                 work_dir: Path, mspec: ModelSpec, root: Path, bench_dir: Path, timeout: float | None,
                 on_progress: ProgressCallback | None) -> None:
        self.benchmark, self.adapter, self.settings, self.runner = benchmark, adapter, settings, runner
        self.work_dir, self.mspec, self.root, self.bench_dir = work_dir, mspec, root, bench_dir
        self.timeout, self.on_progress = timeout, on_progress
        self.on_warning: WarningCallback | None = None
        self.judge_skipped = False
        self.config_digests: dict[str, str] = {}

    def blocks(self, split: str, suffix: bool) -> list[DatasetBlock]:
        blocks = self.adapter.dataset_blocks(self.root, split, judge=_judge(self.settings, routed=True))  # type: ignore[arg-type]
        if not blocks:
            raise StepError(f"benchmark {self.benchmark} has no {split} items", error_type=ErrorType.EVAL)
        out = []
        for b in blocks:
            cap = answer_token_limit(b.max_out_len, self.mspec.max_out_len, thinking=self.mspec.enable_thinking,
                                     max_seq_len=self.mspec.max_seq_len)
            update: dict[str, Any] = {"max_out_len": cap}
            if suffix:
                update["abbr"] = parse.split_abbr(b.abbr, split)
            out.append(b.model_copy(update=update))
        return out

    def run(self, splits: list[str], *, in_process: bool) -> tuple[Path | None, dict[str, list[str]], StepError | None]:
        """One OpenCompass run of ``splits``: (run dir, dataset names per split, error of the run)."""
        ft = self.settings.ft
        per_split = {s: self.blocks(s, suffix=in_process) for s in splits}
        blocks = [b for s in splits for b in per_split[s]]
        label = "+".join(splits)
        source = render_config(blocks, self.mspec, benchmark=self.benchmark, split=label,
                               num_runs=ft.benchmark_num_runs, pass_k=ft.benchmark_pass_k, in_process=in_process)
        # what decides each split's score, hashed before OpenCompass runs (the integrity guard's eval_config)
        self.config_digests = {split or splits[0]: digest for split, digest in split_digests(source).items()}
        self.work_dir.mkdir(parents=True, exist_ok=True)
        tag = "_".join(splits)
        cfg = self.work_dir / f"oc_{tag}.py"
        cfg.write_text(source, encoding="utf-8")
        out_dir = self.work_dir / "eval" / tag
        env = {"PYTHONPATH": str(PACKAGE_ROOT), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
               "TRANSFORMERS_OFFLINE": "1"}
        judge_env, judge_mounts = judge_run_env(ft.file_path) if any(b.judge for b in blocks) else ({}, [])
        env.update(judge_env)  # tiktoken's cached files and the host's proxies (judge.py)
        route = getattr(self.settings, "judge_route", None)
        if ft.judge_api_key is not None and route is not None:  # the gateway's token, never the real key
            env["OPENAI_API_KEY"] = route.token
        elif ft.judge_api_key is not None:  # no session gateway (a direct library call): the real key
            env["OPENAI_API_KEY"] = ft.judge_api_key.get_secret_value()
        if self.mspec.backend == "vllm-server" or route is not None:  # loopback servers: bypass any proxy
            env["NO_PROXY"] = env["no_proxy"] = ",".join(
                x for x in ("127.0.0.1", "localhost", os.environ.get("NO_PROXY", "")) if x)
        mounts = [Mount(source=self.bench_dir), Mount(source=PACKAGE_ROOT / "ftagent"),
                  Mount(source=Path(self.mspec.path)), Mount(source=self.work_dir, read_only=False),
                  *judge_mounts]
        if self.mspec.adapter_path:
            mounts.append(Mount(source=Path(self.mspec.adapter_path)))
        log_file = self.work_dir / f"opencompass_{tag}.log"
        runs = max(1, ft.benchmark_num_runs or 1)
        infos = [DatasetInfo(abbr=b.abbr, split=s, generations=_count_rows(b.path) * runs)
                 for s in splits for b in per_split[s]]
        tracker = ProgressTracker(infos, self.mspec.batch_size, self.on_progress)
        refused = route.refused if route is not None else 0
        with LogFollower(log_file, tracker):
            res = run_scrubbed(self.runner, ["opencompass", str(cfg), "--work-dir", str(out_dir)],
                               tree=self.work_dir, tool="eval", workdir=self.work_dir, env=env, mounts=mounts,
                               timeout=self.timeout, log_file=log_file)
        run = parse.latest_run(out_dir)
        skipped = route.refused - refused if route is not None else 0
        self.judge_skipped = skipped > 0  # a rule-only score: shown, never cached as the judged one
        if skipped and self.on_warning is not None:
            self.on_warning(f"{self.benchmark}/{label}: the LLM judge was refused {skipped} time(s) "
                            "(FT_LLM_BUDGET_USD is spent): those items keep their rule-based score, "
                            "and this result is not cached")
        names = {s: [b.abbr for b in per_split[s]] for s in splits}
        reason = "timed out" if res.timed_out else parse.failure_reason(run)
        error = None
        if reason:
            check_disk_full(res.log_tail + "\n" + (_log_lines(run) or ""), "evaluation", [self.work_dir])
            error = StepError(f"OpenCompass evaluation of {self.benchmark}/{label} failed: {reason}",
                              error_type=ErrorType.TIMEOUT if res.timed_out else ErrorType.EVAL,
                              log_tail=_log_lines(run) or res.log_tail,
                              details={"run_dir": str(run) if run else None, "timed_out": res.timed_out})
        return run, names, error


def _merge(adapter: Path, base: Path | None, out: Path, runner: Runner, timeout: float | None) -> Path:
    if base is None:
        raise StepError("LoRA adapter without a base model path", error_type=ErrorType.EVAL)
    if (out / "config.json").exists():
        return out
    res = run_scrubbed(runner, merge_command(base, adapter, out), tree=out.parent, tool="eval", workdir=out.parent,
                       mounts=[Mount(source=base), Mount(source=adapter), Mount(source=out.parent, read_only=False)],
                       timeout=timeout, log_file=out.parent / "merge.log")
    if not res.ok:
        raise StepError("merging the LoRA adapter failed", error_type=ErrorType.EVAL, log_tail=res.log_tail)
    return out


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


def _result(run: Path, split: str, spec: Any, benchmark: str, duration: float, one_split: bool) -> EvalResult:
    which = None if one_split else split
    metrics = parse.read_metrics(run, which)
    items = write_item_scores(run, split, spec.core_metric, metrics, benchmark=benchmark, one_split=one_split)
    return EvalResult(benchmark=benchmark, split=split, core_metric=spec.core_metric,
                      direction=spec.direction, score=parse.core_score(metrics, spec.core_metric),
                      metrics=metrics, error_samples=parse.error_samples(run, split=which), run_dir=str(run),
                      duration_s=duration, answers=parse.prediction_profile(run, which), items_file=items)


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
        benchmark: the resolved benchmark (:attr:`ftagent.finetune.startup.ResolvedRun.adapter`; a tool or
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
    adapter, key = benchmark, benchmark.spec.key  # the key names caches and runs from here on
    spec = adapter.spec
    root = benchmarks_dir(ft.file_path)
    limit = ft.benchmark_limit
    if sample is not None:
        limit = sample if limit is None else min(limit, sample)
        root = root / f".sample{limit}"  # "." : never a benchmark key
    if items_root is not None and sample is None:  # the session's own copy: never prepared again (issue 39.6)
        root, bench_dir = Path(items_root), Path(items_root) / key
        if not (bench_dir / "validation.jsonl").is_file():
            raise StepError(f"the session's copy of benchmark {key} is missing ({bench_dir})", error_type=ErrorType.EVAL,
                            suggestion="it lives under FT_FILE_PATH/benchmarks/.frozen; start a new session")
    else:
        bench_dir = prepare_benchmark(adapter, root, limit)
    model_path = Path(model_path)
    if not (model_path / "config.json").exists() and not is_lora_adapter(model_path):
        raise StepError(f"model folder {model_path} has no config.json or adapter files",
                        error_type=ErrorType.EVAL, suggestion="check that training saved the model")
    base = Path(base_path) if base_path else None
    is_lora = is_lora_adapter(model_path)
    command = serve_command or VllmServeCommand(vllm_env_path(settings))
    choice = choose_backend(gpu_count, runner, forced=ft.eval_backend, server=lambda: server_check(command))
    warn_once(choice, env_identity(runner), on_warning)
    mspec = server_spec(model_spec(model_path, base, model_name, gpu_count, f"ft-{key}", serve_adapter=is_lora,
                                   backend=choice.backend, device=choice.device, inference=inference), gpu_count, placement)
    digest = cache_mod.artefact_digest(model_path, base if is_lora else None)
    cache = cache_mod.EvalCache(eval_cache_dir(ft.file_path))
    keys = {split: cache_mod.cache_key(
        digest, key, split,
        {"data": _data_digest(bench_dir, split), "limit": limit, "runs": ft.benchmark_num_runs,
         "pass_k": ft.benchmark_pass_k, "template": template, "answer_caps": ANSWER_CAP_RULE},
        mspec.model_dump(exclude=KEY_EXCLUDED), TEMPLATE_VERSION,
        judge=_judge(settings)) for split in splits}
    out = SplitResults()
    for split in splits:
        hit = cache.get(keys[split])
        if hit is not None and hit.config_sha256:  # an entry of an older ftagent says not what it was scored with
            out.results[split] = hit
    missing = [s for s in splits if s not in out.results]
    if not missing:
        return out
    _refuse_misfit_weights(model_path, base if is_lora else None, runner, Path(work_dir), eval_cache_dir(ft.file_path),
                           digest, timeout, on_warning)
    if is_lora and mspec.backend in VLLM_LIKE and merge_reasons(model_path, backend="vllm",
                                                                 max_lora_rank=mspec.max_lora_rank):
        safe_call(on_progress, "merge")
        merged = _merge(model_path, base, Path(work_dir) / "merged_model", runner, timeout)
        mspec = mspec.model_copy(update={"path": str(merged), "adapter_path": None})
    job = _Job(benchmark=key, adapter=adapter, settings=settings, runner=runner, work_dir=Path(work_dir), mspec=mspec,
               root=root, bench_dir=bench_dir, timeout=timeout, on_progress=on_progress)
    job.on_warning = on_warning
    served_at = time.monotonic()
    with served_model(mspec, command, Path(work_dir), timeout=timeout, on_progress=on_progress) as job.mspec:
        if timeout:  # the server's start used part of the evaluation's time
            job.timeout = max(1.0, timeout - (time.monotonic() - served_at))
        _run_groups(job, missing, spec, keys, cache, out, start, isolate_tasks)
    safe_call(on_progress, "done")
    if not out.results and out.failures:
        out.require(next(iter(out.failures)))
    return out


def _run_groups(job: _Job, missing: list[str], spec: Any, keys: dict[str, str], cache: cache_mod.EvalCache,
                out: SplitResults, start: float, isolate_tasks: bool) -> None:
    """Run the missing splits (one group, or one per split), caching and recording each result."""
    benchmark = job.benchmark
    groups = [[s] for s in missing] if isolate_tasks else [missing]
    while groups:
        group = groups.pop(0)
        run, names, error = job.run(group, in_process=not isolate_tasks)
        one = isolate_tasks
        done = [s for s in group if error is None or parse.split_complete(run, names[s])]
        failed = [s for s in group if s not in done]
        for split in done:
            assert run is not None
            result = _result(run, split, spec, benchmark, time.monotonic() - start, one)
            result.config_sha256 = job.config_digests.get(split)
            unresolved = unresolved_timeouts(result.metrics)
            for line in unresolved_warnings(f"{benchmark}/{split}", unresolved):
                if job.on_warning is not None:
                    job.on_warning(line)
            if not job.judge_skipped and not unresolved:  # a verdict the machine's load decided is not kept
                cache.put(keys[split], result)
            out.results[split] = result
        if not failed:
            continue
        assert error is not None
        if len(group) > 1 and not done and not (error.details or {}).get("timed_out"):
            groups.insert(0, [failed[0]])  # find out whether the first split fails on its own
            rest = failed[1:]
            out.failures.update({s: error.to_failure("evaluate") for s in rest})
            continue
        for split in failed:
            out.failures[split] = error.to_failure("evaluate")
