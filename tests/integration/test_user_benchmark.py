"""End to end: a user benchmark (YAML + JSONL, no code) drives `ftagent llm_finetune` for one loop.

Real LLaMA-Factory + OpenCompass on CPU, tiny model, heuristic planner. The benchmark is the minimal
file of docs/benchmarks.md (exact match, prompt ``{question}``) plus ``related_datasets: [demo_add]``
so the planner has training data; its items use the demo's addition wording with ``\\boxed{n}`` as the
gold text, and the demo's own pairs, which the demo_add training generator avoids.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftagent.benchmarks.demo import demo_add_items
from tests.helpers.wheel_venv import assert_imports_wheel, outside_env

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
BENCH_YAML = """\
name: my_bench
description: "Reply with the sum inside \\\\boxed{}, nothing else."
data: {file: my_bench.jsonl}
prompt: "{question}"
answer: answer
metric: exact_match
related_datasets: [demo_add]
"""


def _write_benchmark(folder: Path) -> None:
    (folder / "my_bench.yaml").write_text(BENCH_YAML, encoding="utf-8")
    with (folder / "my_bench.jsonl").open("w", encoding="utf-8") as fh:
        for item in demo_add_items():
            row = {"question": f"{item['question']} Put the final answer in \\boxed{{}}.",
                   "answer": f"\\boxed{{{item['answer']}}}"}
            fh.write(json.dumps(row) + "\n")


def test_user_benchmark_yaml_runs_one_loop(tmp_path, tools_env, wheel_venv):
    """Run by the wheel's ``bin/ftagent`` in a fresh venv from a folder outside the source tree (issue 32):
    the configs and the OpenCompass extension handed to the tool env come from the installed wheel."""
    _write_benchmark(tmp_path)
    env = outside_env({"FT_FILE_PATH": str(tmp_path / "files"), "LOG_PATH": str(tmp_path / "log"),
                       "WORKSPACE_PATH": str(tmp_path / "ws"), "FT_TOOLS_ENV": str(tools_env), "FT_ENV_TYPE": "local",
                       "FT_BENCHMARK_LIMIT": "10", "FT_UPPER_DATA_SIZE_LIMIT": "5000", "FT_PLANNER": "heuristic"},
                      drop=("FT_", "CHAT_", "OPENAI_"))
    assert not tmp_path.is_relative_to(REPO)
    assert_imports_wheel(wheel_venv, tmp_path, env)
    proc = subprocess.run(
        [str(wheel_venv / "bin" / "ftagent"), "llm_finetune", "--benchmark", "./my_bench.yaml",
         "--base-model", "builtin/tiny-qwen2", "--loop-n", "1"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    bench_dir = tmp_path / "files" / "benchmarks" / "my_bench"  # where only evaluation sees it
    val = [json.loads(line) for line in (bench_dir / "validation.jsonl").read_text().splitlines()]
    test = [json.loads(line) for line in (bench_dir / "test.jsonl").read_text().splitlines()]
    assert len(val) == len(test) == 10 and not {r["question"] for r in val} & {r["question"] for r in test}
    (session,) = (tmp_path / "log").iterdir()
    run_cfg = json.loads((session / "report.json").read_text())
    assert run_cfg["benchmark"] == "my_bench" and run_cfg["loops"], run_cfg
    scores = {(e["split"], e.get("baseline", False)): e["score"]
              for e in map(json.loads, (session / "events.jsonl").read_text().splitlines())
              if e["type"] == "benchmark_result"}
    assert scores[("validation", True)] is not None and scores[("validation", False)] is not None, scores
    questions = [r["question"] for r in test]
    generated = "\n".join(p.read_text(encoding="utf-8") for p in (tmp_path / "ws").rglob("*")
                          if p.suffix in {".py", ".yaml"})
    assert not [q for q in questions if q in generated]  # the test split never reaches generated code
    print(json.dumps({"scores": {f"{k[0]}{'(baseline)' if k[1] else ''}": v for k, v in scores.items()}}))


def test_prompts_of_a_user_benchmark_file(tmp_path, tools_env):
    """`ftagent prompts --benchmark ./file.yaml` takes the start-up of llm_finetune (it once looked the
    file path up as a key: FileNotFoundError …/benchmarks/my_bench.yaml/prepared.json)."""
    _write_benchmark(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FT_", "CHAT_", "OPENAI_"))}
    env.update({"PYTHONPATH": str(REPO), "FT_FILE_PATH": str(tmp_path / "files"), "LOG_PATH": str(tmp_path / "log"),
                "WORKSPACE_PATH": str(tmp_path / "ws"), "FT_TOOLS_ENV": str(tools_env), "FT_ENV_TYPE": "local",
                "FT_BENCHMARK_LIMIT": "10"})
    proc = subprocess.run(
        [sys.executable, "-m", "ftagent", "prompts", "--benchmark", "./my_bench.yaml",
         "--base-model", "builtin/tiny-qwen2", "--step", "propose"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.startswith("===== propose:") and "my_bench" in proc.stdout
    assert "Reply with the sum inside" in proc.stdout  # the file's description reached the brief
    assert not (tmp_path / "log").exists() or not any((tmp_path / "log").iterdir())  # no session written
