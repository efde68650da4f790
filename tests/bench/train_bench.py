"""Training benchmarks (issue 3), measured side by side in one run.

(a) fail-fast: wall of ``LlamaFactoryValidator.validate`` on a broken config (``lr_scheduler_type:
    bogus`` → CONFIG failure from the micro-batch) ÷ wall of a full CPU training of the tiny model
    (cpu-recipes §4.5 config, 5000 demo_add rows);
(b) overhead: ``LlamaFactoryTrainer.train`` through ``LocalRunner`` (sandbox included) ÷ the same
    final YAML run by hand with ``<tools>/bin/llamafactory-cli train`` — target ≤ 1.05;
(c) peak RSS of the training process tree of both.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
from pathlib import Path
from typing import Any

import yaml

from tests.bench.common import BenchResults, load_average, offline_env, run_command, timed_children

SECTION = "train"
ROWS = 5000

# cpu-recipes §4.5: the planner-level keys of the recommended demo config (paths are system-managed).
DEMO_CONFIG: dict[str, Any] = {
    "finetuning_type": "full",
    "template": "chatml",
    "cutoff_len": 64,
    "per_device_train_batch_size": 32,
    "gradient_accumulation_steps": 1,
    "learning_rate": 1.0e-3,
    "lr_scheduler_type": "cosine",
    "warmup_steps": 50,
    "weight_decay": 0.0,
    "seed": 2,
    "logging_steps": 25,
    "save_strategy": "no",
}


def _workspace(root: Path, name: str, config: dict[str, Any], rows: list[dict]) -> Path:
    ws = root / name
    shutil.rmtree(ws, ignore_errors=True)
    ws.mkdir(parents=True)
    (ws / "data.json").write_text(json.dumps(rows), encoding="utf-8")
    (ws / "train.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    return ws


def setup(root: Path, tools_env: Path, sandbox: str = "auto"):
    """Tiny model, catalogue, scenario, settings and runner under ``root`` (not timed)."""
    from ftagent.core.settings import load_settings
    from ftagent.core.types import ScenarioInfo
    from ftagent.datasets.demo_add import benchmark_pairs, generate_rows
    from ftagent.models.builtin import build_builtin
    from ftagent.runners.local import LocalRunner
    from ftagent.tools.llamafactory.catalogue import load_or_build_catalogue

    runner = LocalRunner(tools_env, sandbox=sandbox, gpu=False)
    model = build_builtin("tiny-qwen2", root / "models" / "builtin" / "tiny-qwen2", tools_env / "bin" / "python")
    info = root / "file_path" / ".llama_factory_info"
    load_or_build_catalogue(info, runner)
    scen = ScenarioInfo(benchmark="demo_add", base_model="builtin/tiny-qwen2", base_model_path=str(model),
                        file_path=str(root / "file_path"), workspace_root=str(root),
                        llama_factory_info_dir=str(info))
    settings = load_settings(file_path=str(root / "file_path"))
    rows = generate_rows(ROWS, exclude=benchmark_pairs())
    return runner, scen, settings, rows


def bench_fail_fast(res: BenchResults, root: Path, runner, scen, settings, rows) -> float:
    """Validate the broken config; record and return its wall time."""
    from ftagent.core.types import CodeResult
    from ftagent.tools.llamafactory.validator import LlamaFactoryValidator

    ws = _workspace(root, "broken", {**DEMO_CONFIG, "lr_scheduler_type": "bogus", "max_steps": 800}, rows)
    with timed_children() as t:
        report = LlamaFactoryValidator(scen, settings, runner=runner).validate(CodeResult(workspace=str(ws)),
                                                                               None)
    failure = report.failure
    detail = f"passed={report.passed}, {failure.error_type.value if failure else '-'}"
    res.add(SECTION, "reject broken config (validate)", t.wall_s, "s", detail)
    if report.passed or failure is None or failure.error_type.value != "CONFIG":
        res.errors["train.fail_fast"] = f"expected a CONFIG rejection, got {detail}"
    return t.wall_s


def bench_training(res: BenchResults, root: Path, runner, scen, settings, rows, steps: int,
                   reject_s: float | None, repeats: int = 2) -> None:
    """Validate the demo config, then train it with ftagent and by hand, ``repeats`` times each (ABBA)."""
    from ftagent.core.types import CodeResult
    from ftagent.tools.llamafactory.trainer import LlamaFactoryTrainer
    from ftagent.tools.llamafactory.validator import LlamaFactoryValidator

    ws = _workspace(root, "demo_full", {**DEMO_CONFIG, "max_steps": steps}, rows)
    with timed_children() as tv:
        report = LlamaFactoryValidator(scen, settings, runner=runner).validate(CodeResult(workspace=str(ws)),
                                                                               None)
    if not report.passed:
        res.errors["train.validate"] = report.failure.summary() if report.failure else "validation failed"
        return
    res.add(SECTION, "validate good config (micro-batch)", tv.wall_s, "s")
    final_yaml = Path(report.config_path or ws / "train.yaml")
    hand_yaml = root / "by_hand" / "train.yaml"
    hand_yaml.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(final_yaml, hand_yaml)  # byte-identical final YAML (same output_dir, overwritten)

    trainer = LlamaFactoryTrainer(scen, settings, runner=runner)
    env = {**os.environ, **offline_env(), "HF_DATASETS_CACHE": str(root / "by_hand" / ".cache")}
    output_dir = Path(yaml.safe_load(hand_yaml.read_text(encoding="utf-8"))["output_dir"])

    def ftagent_run() -> tuple[float, float, float | None]:
        with timed_children() as t:
            result = trainer.train(CodeResult(workspace=str(ws)), report, None)
        return t.wall_s, t.peak_rss_mib, result.train_runtime_s

    def by_hand_run() -> tuple[float, float, float | None]:
        t = run_command([str(runner.bin_dir / "llamafactory-cli"), "train", str(hand_yaml)], cwd=hand_yaml.parent,
                        env=env, log_file=root / "by_hand" / "train.log")
        if t.exit_code != 0:
            raise RuntimeError(f"llamafactory-cli exited {t.exit_code}; see {root / 'by_hand' / 'train.log'}")
        return t.wall_s, t.peak_rss_mib, _train_runtime(output_dir)

    runs: dict[str, list[tuple[float, float, float | None]]] = {"ftagent": [], "by_hand": []}
    for i in range(repeats):  # ABBA order: drift in the machine's load hits both sides alike
        order = (("ftagent", ftagent_run), ("by_hand", by_hand_run))
        for name, fn in order if i % 2 == 0 else order[::-1]:
            wall, rss, runtime = fn()
            runs[name].append((wall, rss, runtime))
            res.add(SECTION, f"{name} train {steps} steps, run {i + 1}", wall, "s",
                    f"train_runtime {runtime}s, peak RSS {rss:.0f} MiB, load {load_average()}")
    f_wall = statistics.median(r[0] for r in runs["ftagent"])
    h_wall = statistics.median(r[0] for r in runs["by_hand"])
    res.add(SECTION, f"ftagent train {steps} steps (median, LocalRunner)", f_wall, "s",
            f"sandbox={'bwrap' if runner.sandboxed else 'none'}, {repeats} runs")
    res.add(SECTION, f"by-hand llamafactory-cli train {steps} steps (median)", h_wall, "s")
    res.add_ratio(SECTION, "ftagent train / by-hand train (median)", f_wall, h_wall, target_max=1.05)
    res.add_ratio(SECTION, "ftagent train / by-hand train (min)", min(r[0] for r in runs["ftagent"]),
                  min(r[0] for r in runs["by_hand"]), target_max=1.05)
    f_over = _median_overhead(runs["ftagent"])
    h_over = _median_overhead(runs["by_hand"])
    res.add(SECTION, "ftagent wall - train_runtime (median)", f_over, "s", "start-up, load, save, sandbox")
    res.add(SECTION, "by-hand wall - train_runtime (median)", h_over, "s")
    res.add(SECTION, "ftagent extra time outside training", None if f_over is None or h_over is None
            else f_over - h_over, "s")
    f_rss = max(r[1] for r in runs["ftagent"])
    h_rss = max(r[1] for r in runs["by_hand"])
    res.add(SECTION, "peak RSS ftagent training tree", f_rss, "MiB")
    res.add(SECTION, "peak RSS by-hand training tree", h_rss, "MiB")
    res.add_ratio(SECTION, "peak RSS ftagent / by-hand", f_rss, h_rss)
    if reject_s is not None:
        res.add_ratio(SECTION, f"reject broken / full {steps}-step train", reject_s, f_wall)


def _median_overhead(runs: list[tuple[float, float, float | None]]) -> float | None:
    """Median of wall - train_runtime (None when a run did not report its train_runtime)."""
    values = [wall - runtime for wall, _, runtime in runs if runtime is not None]
    return statistics.median(values) if values else None


def _train_runtime(output_dir: Path) -> float | None:
    from ftagent.tools.llamafactory.logs import read_loss_history

    return read_loss_history(output_dir)[1].get("train_runtime")


def run(res: BenchResults, tools_env: Path, work: Path, quick: bool, sandbox: str = "auto",
        repeats: int = 2) -> None:
    """The whole training section (200 steps with ``quick``, else 800)."""
    steps = 200 if quick else 800
    root = work / "train"
    runner, scen, settings, rows = setup(root, tools_env, sandbox)
    reject_s = bench_fail_fast(res, root, runner, scen, settings, rows)
    bench_training(res, root, runner, scen, settings, rows, steps, reject_s, repeats)
