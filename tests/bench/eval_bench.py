"""Evaluation benchmarks (issue 4): HF-on-CPU OpenCompass throughput and the evaluation cache.

* ``evaluate_model_path`` of the tiny model on demo_add validation with a small and a large item
  count; a line fit through the two walls separates start-up from per-item cost;
* the same evaluation again: wall of the cache hit vs the miss;
* ``--gpu``: the vLLM (gpu_count=1) vs HF (gpu_count=0) ratio, skipped with the reason without a GPU.
"""

from __future__ import annotations

from pathlib import Path

from tests.bench.common import BenchResults, ratio, timed_children

SECTION = "eval"


def split_cost(n_small: int, wall_small: float, n_large: int, wall_large: float) -> tuple[float, float]:
    """(start-up seconds, seconds per item) from two walls at two item counts (a straight line)."""
    if n_large == n_small:
        raise ValueError("need two different item counts")
    per_item = (wall_large - wall_small) / (n_large - n_small)
    return wall_small - per_item * n_small, per_item


def _model(root: Path, tools_env: Path) -> Path:
    from ftagent.models.builtin import build_builtin

    return build_builtin("tiny-qwen2", root / "models" / "builtin" / "tiny-qwen2", tools_env / "bin" / "python")


def _evaluate(model: Path, root: Path, n: int, runner, gpu_count: int = 0, tag: str = "hf"):
    from ftagent.core.settings import load_settings
    from ftagent.tools.opencompass.evaluator import evaluate_model_path

    settings = load_settings(file_path=root / f"fp_{tag}_{n}", benchmark_limit=n)
    return evaluate_model_path(model, None, benchmark="demo_add", split="validation", settings=settings,
                               runner=runner, work_dir=root / f"work_{tag}_{n}", model_name="builtin/tiny-qwen2",
                               timeout=1800, gpu_count=gpu_count)


def run(res: BenchResults, tools_env: Path, work: Path, quick: bool, model: Path | None = None) -> None:
    """Throughput at two item counts and the cache hit/miss walls."""
    from ftagent.runners.local import LocalRunner

    root = work / "eval"
    runner = LocalRunner(tools_env, sandbox="auto", gpu=False)
    model = model or _model(root, tools_env)
    counts = (10, 40) if quick else (20, 100)
    walls: dict[int, float] = {}
    for n in counts:
        with timed_children() as t:
            result = _evaluate(model, root, n, runner)
        walls[n] = t.wall_s
        res.add(SECTION, f"OpenCompass HF/CPU, {n} items (miss)", t.wall_s, "s",
                f"score {result.score}, peak RSS {t.peak_rss_mib:.0f} MiB")
        res.add(SECTION, f"throughput {n} items", n / t.wall_s, "items/s")
    small, large = counts
    startup, per_item = split_cost(small, walls[small], large, walls[large])
    res.add(SECTION, "fitted start-up per evaluation", startup, "s")
    res.add(SECTION, "fitted cost per item", per_item, "s/item",
            "" if per_item > 0 else "not above the noise of the start-up: per-item cost is negligible here")
    res.add(SECTION, "marginal throughput (1 / cost per item)", ratio(1.0, per_item), "items/s")
    with timed_children() as hit_t:
        hit = _evaluate(model, root, large, runner)
    res.add(SECTION, f"cache hit, {large} items", hit_t.wall_s, "s", f"cached={hit.cached}")
    if not hit.cached:
        res.errors["eval.cache"] = "second evaluation of the same model was not a cache hit"
    res.add(SECTION, "time saved by the cache", walls[large] - hit_t.wall_s, "s")
    res.add_ratio(SECTION, "cache hit / miss", hit_t.wall_s, walls[large], target_max=0.1)


def run_gpu(res: BenchResults, tools_env: Path | None, work: Path, quick: bool) -> None:
    """vLLM vs HF on the same items when a GPU is present; otherwise record why it was skipped."""
    from ftagent.core.hardware import detect_gpus
    from ftagent.runners.local import LocalRunner

    info = detect_gpus()
    if info.gpu_count == 0:
        reason = f"no GPU ({info.message or 'NVML reports 0 devices'})"
        res.skipped["gpu"] = reason
        print(f"[gpu] skipped: {reason}", flush=True)
        return
    if tools_env is None:
        raise RuntimeError("a GPU is present but FT_TOOLS_ENV is not set to a tool env")
    root = work / "gpu"
    runner = LocalRunner(tools_env, sandbox="auto", gpu=True)
    model = _model(root, tools_env)
    n = 40 if quick else 100
    walls = {}
    for tag, gpus in (("hf", 0), ("vllm", 1)):
        with timed_children() as t:
            _evaluate(model, root, n, runner, gpu_count=gpus, tag=tag)
        walls[tag] = t.wall_s
        res.add("gpu", f"OpenCompass {tag}, {n} items", t.wall_s, "s")
    res.add_ratio("gpu", "vLLM wall / HF wall", walls["vllm"], walls["hf"])
