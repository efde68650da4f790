"""One OpenCompass run of a model on some splits, and the groups of runs of one evaluation call.

:class:`EvalJob` holds what one call of :func:`~.runs.evaluate_splits_of_path` shares between its runs (the
benchmark, the model block, the items folder, the runner) and runs OpenCompass once on a list of splits;
:func:`run_groups` runs the missing splits (one group, or one per split), caches and records each result, and
tries a failed group's first split alone. :func:`merge_adapter` is the one LoRA merge (before a vLLM backend
that cannot serve the adapter).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ftagent.core.disk import check_disk_full
from ftagent.core.errors import ErrorType, StepError
from ftagent.core.paths import package_root
from ftagent.core.types import EvalResult, SplitResults
from ftagent.integrity.eval_config import split_digests
from ftagent.runners.base import Mount, Runner
from ftagent.runners.scrubbed import run_scrubbed
from ftagent.tools.opencompass import cache as cache_mod
from ftagent.tools.opencompass import parse
from ftagent.tools.opencompass.inference import answer_token_limit
from ftagent.tools.opencompass.items import write_item_scores
from ftagent.tools.opencompass.judge import judge_run_env
from ftagent.tools.opencompass.merge import merge_command
from ftagent.tools.opencompass.model_block import judge_block
from ftagent.tools.opencompass.progress import DatasetInfo, LogFollower, ProgressCallback, ProgressTracker
from ftagent.tools.opencompass.render import ModelSpec, render_config
from ftagent.tools.opencompass.timeouts import unresolved_timeouts, unresolved_warnings

if TYPE_CHECKING:
    from ftagent.benchmarks.base import BenchmarkAdapter, DatasetBlock
    from ftagent.core.settings import Settings

PACKAGE_ROOT = package_root()  # puts ftagent.tools.opencompass.oc_ext on PYTHONPATH
WarningCallback = Callable[[str], None]


def _log_lines(run: Path | None, limit: int = 60) -> str:
    if run is None:
        return ""
    lines: list[str] = []
    for log in sorted(run.glob("logs/*/**/*.out")):
        text = log.read_text(encoding="utf-8", errors="replace").splitlines()
        lines += [f"== {log.relative_to(run)}"] + text[-limit:]
    return "\n".join(lines[-3 * limit:])


def _count_rows(path: str) -> int:
    try:
        with open(path, encoding="utf-8") as fh:
            return sum(1 for line in fh if line.strip())
    except OSError:
        return 0


class EvalJob:
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
        blocks = self.adapter.dataset_blocks(self.root, split, judge=judge_block(self.settings, routed=True))  # type: ignore[arg-type]
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


def merge_adapter(adapter: Path, base: Path | None, out: Path, runner: Runner, timeout: float | None) -> Path:
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


def _result(run: Path, split: str, spec: Any, benchmark: str, duration: float, one_split: bool) -> EvalResult:
    which = None if one_split else split
    metrics = parse.read_metrics(run, which)
    items = write_item_scores(run, split, spec.core_metric, metrics, benchmark=benchmark, one_split=one_split)
    return EvalResult(benchmark=benchmark, split=split, core_metric=spec.core_metric,
                      direction=spec.direction, score=parse.core_score(metrics, spec.core_metric),
                      metrics=metrics, error_samples=parse.error_samples(run, split=which), run_dir=str(run),
                      duration_s=duration, answers=parse.prediction_profile(run, which), items_file=items)


def run_groups(job: EvalJob, missing: list[str], spec: Any, keys: dict[str, str], cache: cache_mod.EvalCache,
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
