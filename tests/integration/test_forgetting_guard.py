"""The forgetting guard for real (issue 31 item 6): LLaMA-Factory and OpenCompass on CPU.

The guard benchmark is a user YAML benchmark of a second task ("Item 17: what does a cow say?" →
"moo", four animals). ``builtin/tiny-qwen2`` taught that task (full, lr 1e-3, 150 steps) is the guard's
base; a "destroying" recipe — the same rows with shuffled answers, 40 steps from it — is the candidate.
Scored by the real evaluation on a 30-item sample, the guard blocks the candidate and passes the able
model scored against itself (+0.0 [+0.0, +0.0], from the evaluation cache). (A first try taught demo_add
with the demo's 300-step recipe: 10 % on the sample, too little skill to lose.) Measured: -73.3 [-86.7,
-56.7] on 30 items, blocked; 372 s on 2 cores at load 9 (two trainings 184 s, two guard evaluations 166 s).
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest
import yaml

from ftagent.benchmarks import get_benchmark
from ftagent.core.settings import load_settings
from ftagent.core.types import CodeResult, ScenarioInfo, TrainResult, ValidationReport
from ftagent.finetune.forgetting_guard import ForgettingGuard
from ftagent.runners.local import LocalRunner
from ftagent.tools.llamafactory.trainer import LlamaFactoryTrainer
from ftagent.tools.opencompass.inference import inference_settings

pytestmark = pytest.mark.integration

SAMPLE = 30
SOUNDS = {"cow": "moo", "cat": "meow", "dog": "woof", "duck": "quack"}
BENCH_YAML = """\
name: animal_sounds
description: "Say the animal's sound."
data: {file: animal_sounds.jsonl}
prompt: "{question}"
answer: answer
metric: contains
"""


def _rows(first: int, n: int) -> list[dict]:
    rng = random.Random(first)
    animals = [rng.choice(sorted(SOUNDS)) for _ in range(n)]
    return [{"question": f"Item {first + i}: what does a {a} say?", "answer": SOUNDS[a]} for i, a in enumerate(animals)]


def _benchmark(folder: Path):
    folder.mkdir(parents=True)
    (folder / "animal_sounds.yaml").write_text(BENCH_YAML, encoding="utf-8")
    (folder / "animal_sounds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows(0, 200)))
    return get_benchmark(str(folder / "animal_sounds.yaml"))


def _train(root: Path, name: str, base: Path, rows: list[dict], runner, **recipe) -> TrainResult:
    ws = root / name
    ws.mkdir(parents=True)
    (ws / "data.json").write_text(json.dumps(rows))
    (ws / "dataset_info.json").write_text(json.dumps({"ftagent_data": {"file_name": "data.json"}}))
    config = {"model_name_or_path": str(base), "stage": "sft", "do_train": True, "finetuning_type": "full",
              "dataset": "ftagent_data", "dataset_dir": str(ws), "template": "chatml", "cutoff_len": 64,
              "output_dir": str(ws / "output"), "per_device_train_batch_size": 32, "lr_scheduler_type": "cosine",
              "logging_steps": 10, "save_strategy": "no", "report_to": "none", "overwrite_output_dir": True,
              "seed": 2, **recipe}
    (ws / "train.yaml").write_text(yaml.safe_dump(config))
    scen = ScenarioInfo(benchmark="demo_add", base_model="builtin/tiny-qwen2", base_model_path=str(base),
                        file_path=str(root / "ft"), workspace_root=str(root))
    start = time.monotonic()
    out = LlamaFactoryTrainer(scen, load_settings(file_path=str(root / "ft")), runner=runner).train(
        CodeResult(workspace=str(ws)), ValidationReport(passed=True), None)
    print(f"{name}: trained in {time.monotonic() - start:.0f}s")
    return out


def test_a_destroying_recipe_is_kept_from_sota(tiny_model: Path, tools_env: Path, tmp_path: Path) -> None:
    runner = LocalRunner(tools_env, sandbox="auto", gpu=False)
    adapter = _benchmark(tmp_path / "bench")
    rows = [{"instruction": r["question"], "input": "", "output": r["answer"]} for r in _rows(1000, 2000)]
    able = _train(tmp_path, "able", tiny_model, rows, runner, learning_rate=1e-3, max_steps=150, warmup_steps=10)
    answers = [r["output"] for r in rows]
    random.Random(0).shuffle(answers)  # each question with another row's answer
    wrong = [{**r, "output": a} for r, a in zip(rows, answers, strict=True)]
    destroyed = _train(tmp_path, "destroyed", Path(able.model_path), wrong, runner, learning_rate=1e-3,
                       max_steps=40, warmup_steps=0)

    scen = ScenarioInfo(benchmark="other", base_model="builtin/tiny-qwen2", base_model_path=able.model_path,
                        file_path=str(tmp_path / "ft"), workspace_root=str(tmp_path))
    settings = load_settings(file_path=str(tmp_path / "ft"), guard_sample=SAMPLE, guard_max_drop=5.0)
    guard = ForgettingGuard(scen, settings, runner, adapters=[adapter],
                            inference=inference_settings("builtin/tiny-qwen2"))
    start = time.monotonic()
    (bad,) = guard.check(destroyed, timeout=900)
    (same,) = guard.check(able, timeout=900)  # the base's own result, from the evaluation cache
    print(f"guard: {time.monotonic() - start:.0f}s; {bad.text}; {same.text}")

    assert bad.error is None and same.error is None, (bad.error, same.error)
    assert bad.base_score is not None and bad.base_score >= 80.0, bad  # the skill the guard protects
    assert bad.difference.items == SAMPLE and bad.difference.has_interval
    assert bad.blocked and bad.difference.high < -5.0, bad
    assert not same.blocked and (same.difference.diff, same.difference.low, same.difference.high) == (0.0, 0.0, 0.0)
    sample = tmp_path / "ft" / "benchmarks" / f".sample{SAMPLE}" / "animal_sounds"
    assert sum(len(p.read_text().splitlines()) for p in sample.rglob("validation*.jsonl")) == SAMPLE
