"""Evaluation benchmarks (issues 4, 16): what an OpenCompass evaluation costs next to the model.

Side by side, same model (the tiny built-in), same demo_add items, same runner:

* **pure inference** — a plain ``transformers`` generate loop in the tool env, one process (same
  prompts through the model's chat template, greedy, same batch size and ``max_new_tokens``):
  the process wall, and the generate loop alone;
* **in-process** — :func:`evaluate_model_path` as the loop runs it (one OpenCompass process);
* **per-task subprocesses** — the earlier layout (``isolate_tasks=True``: CLI + one subprocess per
  infer/eval task), the "before" figure;
* validation + test in one run vs two earlier-layout runs; the cache hit vs the miss;
* ``--gpu``: the vLLM vs HF ratio, skipped with the reason without a GPU.

Ratios: evaluation wall / pure-inference process wall for 20 and 100 items (target for 100
items: <= 5), and evaluation wall / the generate loop alone (no process start, imports or model load:
a floor no fresh process reaches).
"""

from __future__ import annotations

import json
from pathlib import Path

from ftagent.benchmarks import get_benchmark
from tests.bench.common import BenchResults, ratio, timed_children

SECTION = "eval"
TARGET_EVAL_OVER_INFER = 5.0
PURE_INFER = r'''
import json, sys, time
t0 = time.monotonic()
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
model_dir, items_path, template, max_new, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
tok = AutoTokenizer.from_pretrained(model_dir)
tok.padding_side = "left"
if tok.pad_token is None:
    tok.pad_token = tok.eos_token
model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
rows = [json.loads(line) for line in open(items_path, encoding="utf-8") if line.strip()]
def fill(row):
    text = template
    for key, value in row.items():
        text = text.replace("{" + key + "}", str(value))
    return text
prompts = [tok.apply_chat_template([{"role": "user", "content": fill(r)}], tokenize=False,
                                   add_generation_prompt=True) for r in rows]
t1 = time.monotonic()
outputs = []
with torch.no_grad():
    for i in range(0, len(prompts), batch):
        enc = tok(prompts[i:i + batch], return_tensors="pt", padding=True)
        gen = model.generate(**enc, max_new_tokens=max_new, do_sample=False, pad_token_id=tok.pad_token_id)
        outputs += tok.batch_decode(gen[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
t2 = time.monotonic()
print("PURE_INFER " + json.dumps({"items": len(rows), "setup_s": t1 - t0, "generate_s": t2 - t1}))
'''


def split_cost(n_small: int, wall_small: float, n_large: int, wall_large: float) -> tuple[float, float]:
    """(start-up seconds, seconds per item) from two walls at two item counts (a straight line)."""
    if n_large == n_small:
        raise ValueError("need two different item counts")
    per_item = (wall_large - wall_small) / (n_large - n_small)
    return wall_small - per_item * n_small, per_item


def _model(root: Path, tools_env: Path) -> Path:
    from ftagent.models.builtin import build_builtin

    return build_builtin("tiny-qwen2", root / "models" / "builtin" / "tiny-qwen2", tools_env / "bin" / "python")


def _settings(root: Path, tag: str, n: int):
    from ftagent.core.settings import load_settings

    return load_settings(file_path=root / f"fp_{tag}_{n}", benchmark_limit=n)


def _evaluate(model: Path, root: Path, n: int, runner, gpu_count: int = 0, tag: str = "hf", isolate: bool = False):
    from ftagent.tools.opencompass.evaluator import evaluate_model_path

    return evaluate_model_path(model, None, benchmark=get_benchmark("demo_add"), split="validation", settings=_settings(root, tag, n),
                               runner=runner, work_dir=root / f"work_{tag}_{n}", model_name="builtin/tiny-qwen2",
                               timeout=1800, gpu_count=gpu_count, isolate_tasks=isolate)


def pure_inference(model: Path, root: Path, n: int, runner) -> tuple[float, dict]:
    """(process wall, the script's own timings) of a plain generate loop over the validation items."""
    import time

    from ftagent.benchmarks import get_benchmark
    from ftagent.benchmarks.prepared import prepare_benchmark
    from ftagent.runners.base import Mount
    from ftagent.tools.opencompass.inference import inference_config

    settings = _settings(root, "pure", n)
    bench_root = Path(settings.ft.file_path) / "benchmarks"
    bench_dir = prepare_benchmark(get_benchmark("demo_add"), bench_root, n)
    block = get_benchmark("demo_add").dataset_blocks(bench_root, "validation")[0]
    inf = inference_config("builtin/tiny-qwen2", 0)
    max_new = min(block.max_out_len, int(inf["max_out_len"]))
    work = root / f"work_pure_{n}"
    work.mkdir(parents=True, exist_ok=True)
    script = work / "pure_infer.py"
    script.write_text(PURE_INFER, encoding="utf-8")
    cmd = ["python", str(script), str(model), block.path, block.rounds[-1]["prompt"], str(max_new),
           str(int(inf.get("cpu_batch_size", 8)))]
    t0 = time.monotonic()
    res = runner.run(cmd, tool="eval", workdir=work, mounts=[Mount(source=model), Mount(source=bench_dir),
                                                             Mount(source=work, read_only=False)], timeout=900)
    wall = time.monotonic() - t0
    lines = [ln for ln in res.log_tail.splitlines() if ln.startswith("PURE_INFER ")]
    if not res.ok or not lines:
        raise RuntimeError(f"pure inference failed (exit {res.exit_code}): {res.log_tail[-1500:]}")
    return wall, json.loads(lines[-1].split(" ", 1)[1])


def _one_count(res: BenchResults, model: Path, root: Path, n: int, runner) -> dict[str, float]:
    pure_wall, inner = pure_inference(model, root, n, runner)
    res.add(SECTION, f"pure inference process, {n} items", pure_wall, "s",
            f"setup {inner['setup_s']:.1f}s + generate {inner['generate_s']:.2f}s inside")
    res.add(SECTION, f"pure generate loop only, {n} items", inner["generate_s"], "s")
    walls = {"pure": pure_wall, "generate": inner["generate_s"]}
    for tag, isolate, label in (("old", True, "per-task subprocesses (before)"), ("new", False, "in-process (after)")):
        with timed_children() as t:
            result = _evaluate(model, root, n, runner, tag=tag, isolate=isolate)
        walls[tag] = t.wall_s
        res.add(SECTION, f"OpenCompass {label}, {n} items", t.wall_s, "s",
                f"score {result.score}, peak RSS {t.peak_rss_mib:.0f} MiB")
    res.add_ratio(SECTION, f"before: eval / pure inference, {n} items", walls["old"], pure_wall)
    res.add_ratio(SECTION, f"after: eval / pure inference, {n} items", walls["new"], pure_wall,
                  target_max=TARGET_EVAL_OVER_INFER if n >= 100 else None)
    res.add_ratio(SECTION, f"before: eval / generate loop only, {n} items", walls["old"], walls["generate"])
    res.add_ratio(SECTION, f"after: eval / generate loop only, {n} items", walls["new"], walls["generate"])
    res.add_ratio(SECTION, f"after / before, {n} items", walls["new"], walls["old"])
    return walls


def _both_splits(res: BenchResults, model: Path, root: Path, n: int, runner) -> float:
    """Validation + test: one in-process run vs the two earlier-layout runs; returns the new wall."""
    from ftagent.tools.opencompass.runs import evaluate_splits_of_path

    walls = {}
    for tag, isolate in (("old2", True), ("new2", False)):
        with timed_children() as t:
            out = evaluate_splits_of_path(model, None, benchmark=get_benchmark("demo_add"), splits=("validation", "test"),
                                          settings=_settings(root, tag, n), runner=runner,
                                          work_dir=root / f"work_{tag}_{n}", model_name="builtin/tiny-qwen2",
                                          timeout=1800, isolate_tasks=isolate)
        walls[tag] = t.wall_s
        scores = {s: r.score for s, r in out.results.items()}
        res.add(SECTION, f"validation+test {'2 runs (before)' if isolate else '1 run (after)'}, {n} items each",
                t.wall_s, "s", f"scores {scores}")
    res.add_ratio(SECTION, f"validation+test after / before, {n} items", walls["new2"], walls["old2"])
    return walls["new2"]


def run(res: BenchResults, tools_env: Path, work: Path, quick: bool, model: Path | None = None) -> None:
    """Pure inference vs both evaluation layouts at two item counts, both splits, the cache."""
    from ftagent.runners.local import LocalRunner

    root = work / "eval"
    runner = LocalRunner(tools_env, sandbox="auto", gpu=False)
    model = model or _model(root, tools_env)
    counts = (10, 40) if quick else (20, 100)
    walls = {n: _one_count(res, model, root, n, runner) for n in counts}
    small, large = counts
    startup, per_item = split_cost(small, walls[small]["new"], large, walls[large]["new"])
    res.add(SECTION, "fitted start-up per evaluation (after)", startup, "s")
    res.add(SECTION, "fitted cost per item (after)", per_item, "s/item",
            "" if per_item > 0 else "not above the noise of the start-up: per-item cost is negligible here")
    res.add(SECTION, "marginal throughput (1 / cost per item)", ratio(1.0, per_item), "items/s")
    _both_splits(res, model, root, large, runner)
    with timed_children() as hit_t:
        hit = _evaluate(model, root, large, runner, tag="new")
    res.add(SECTION, f"cache hit, {large} items", hit_t.wall_s, "s", f"cached={hit.cached}")
    if not hit.cached:
        res.errors["eval.cache"] = "second evaluation of the same model was not a cache hit"
    res.add(SECTION, "time saved by the cache", walls[large]["new"] - hit_t.wall_s, "s")
    res.add_ratio(SECTION, "cache hit / miss", hit_t.wall_s, walls[large]["new"], target_max=0.1)


def run_gpu(res: BenchResults, tools_env: Path | None, work: Path, quick: bool) -> None:
    """vLLM vs HF on the same items when a GPU is present; otherwise record why it was skipped."""
    from ftagent.core.hardware import detect_gpus
    from ftagent.runners.local import LocalRunner
    from ftagent.tools.opencompass.backend import probe_vllm

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
    probe = probe_vllm(runner)
    model = _model(root, tools_env)
    n = 40 if quick else 100
    walls = {}
    for tag, gpus in (("hf", 0), ("gpu", 1)):
        with timed_children() as t:
            _evaluate(model, root, n, runner, gpu_count=gpus, tag=tag)
        walls[tag] = t.wall_s
        res.add("gpu", f"OpenCompass {'HF/CPU' if gpus == 0 else ('vLLM' if probe.available else 'HF/GPU')}, "
                f"{n} items", t.wall_s, "s")
    res.add_ratio("gpu", f"{'vLLM' if probe.available else 'HF/GPU'} wall / HF/CPU wall", walls["gpu"], walls["hf"])


TARGET_DEMO_EVAL_OVER_TRAIN = 0.35


def analyse_demo(res: BenchResults, session: Path) -> None:
    """The demo session's evaluation wall / training wall (the report's "training Ns, evaluation Ns":
    sums of the ``run`` events with purpose ``train*`` and ``eval``, baseline included)."""
    from tests.bench.demo_bench import read_jsonl

    runs = [e for e in read_jsonl(Path(session) / "events.jsonl") if e.get("type") == "run"]
    train = sum(float(e.get("duration_s") or 0) for e in runs if str(e.get("purpose", "")).startswith("train"))
    evaluation = sum(float(e.get("duration_s") or 0) for e in runs if e.get("purpose") == "eval")
    res.add(SECTION, "demo: training wall (run events)", train, "s")
    res.add(SECTION, "demo: evaluation wall (run events)", evaluation, "s",
            f"{sum(1 for e in runs if e.get('purpose') == 'eval')} evaluation runs")
    res.add_ratio(SECTION, "demo evaluation / training", evaluation, train, target_max=TARGET_DEMO_EVAL_OVER_TRAIN)
