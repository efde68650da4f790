"""End to end: your own training file (`--dataset ./my_data.jsonl`, no code) for `ftagent llm_finetune`.

Real LLaMA-Factory + OpenCompass on CPU, tiny model, heuristic planner:

* an Alpaca file of addition rows that avoid the demo_add benchmark's pairs drives one loop, and the
  loop's ``data.json`` holds exactly those rows;
* a ShareGPT file is registered, and LLaMA-Factory itself reads the copy's ``dataset_info.json``
  (``formatting: sharegpt``) and trains two steps on it;
* a file holding benchmark items stops before any session (exit 2, count and row index, no item text).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ftagent.benchmarks.demo import demo_add_items
from ftagent.datasets.demo_add import INSTRUCTION, benchmark_pairs, generate_rows

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def _env(tmp: Path, files: Path, tools_env: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FT_", "CHAT_", "OPENAI_"))}
    env.update({"PYTHONPATH": str(REPO), "FT_FILE_PATH": str(files), "LOG_PATH": str(tmp / "log"),
                "WORKSPACE_PATH": str(tmp / "ws"), "FT_TOOLS_ENV": str(tools_env), "FT_ENV_TYPE": "local",
                "FT_BENCHMARK_LIMIT": "10", "FT_UPPER_DATA_SIZE_LIMIT": "3000", "FT_PLANNER": "heuristic"})
    return env


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ftagent", "llm_finetune", "--benchmark", "demo_add",
                           "--base-model", "builtin/tiny-qwen2", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=1800)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """One FT_FILE_PATH for the module: the tiny model and the benchmark data are built once."""
    return tmp_path_factory.mktemp("files")


def test_alpaca_file_trains_one_loop(tmp_path, files, tools_env):
    rows = generate_rows(n=3000, seed=99, exclude=benchmark_pairs())
    with (tmp_path / "my_data.jsonl").open("w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    proc = _run(["--dataset", "./my_data.jsonl", "--loop-n", "1"], tmp_path, _env(tmp_path, files, tools_env))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    copy = files / "datasets" / "my_data"
    assert (copy / "my_data.jsonl").read_bytes() == (tmp_path / "my_data.jsonl").read_bytes()
    (session,) = (tmp_path / "log").iterdir()
    events = [json.loads(line) for line in (session / "events.jsonl").read_text().splitlines()]
    said = [e["text"] for e in events if e["type"] == "message" and "dataset `my_data`" in e.get("text", "")]
    assert said and "Alpaca (`instruction`, `input`, `output`) detected, 3,000 rows" in said[0], said
    assert any(e["type"] == "scenario_stage" and e["stage"] == "user_dataset_scan" and e["status"] == "done"
               for e in events)
    catalogue = json.loads((files / "datasets" / "dataset_info.json").read_text())
    assert catalogue["my_data"]["total_samples"] == 3000

    # the loop's training data: the file's rows, as the full data run wrote them (data/loop_0/; the workspace's
    # loop folder also holds the --debug run's data.json, and the trainer reads a hard link of the sealed one)
    (data,) = (tmp_path / "ws").rglob("data/loop_0/data.json")
    trained = json.loads(data.read_text())
    assert trained and {r["instruction"] for r in trained} <= {r["instruction"] for r in rows}
    losses = [e["detail"]["loss"] for e in events if e["type"] == "progress" and e.get("phase") == "train"
              and e.get("detail", {}).get("loss") is not None]
    assert len(losses) >= 5 and losses[-1] < losses[0] / 2, losses  # it trained on them (300 probe steps)
    report = json.loads((session / "report.json").read_text())
    assert report["loops"] and report["loops"][0].get("val_score") is not None, report["loops"]

    from ftagent.engine.session import Session
    from ftagent.finetune.state import FinetuneSessionState

    state = Session.load(session, FinetuneSessionState)[0].state
    assert state.config["run"]["dataset"] == "my_data"  # what --path resumes on, without --dataset
    assert state.scenario.datasets == ["my_data"]


def test_sharegpt_file_is_read_by_llamafactory(tmp_path, tools_env, tiny_model):
    from ftagent.datasets.user_file.register import register_user_file

    chats = [{"conversations": [{"from": "human", "value": INSTRUCTION.format(a=a, b=b)},
                                {"from": "gpt", "value": f"\\boxed{{{a + b}}}"}]}
             for a, b in [(11, 12), (13, 14), (15, 16), (17, 18), (19, 20), (21, 22), (23, 24), (25, 26)]]
    src = tmp_path / "chats.json"
    src.write_text(json.dumps(chats), encoding="utf-8")
    info = register_user_file(src, tmp_path / "datasets")
    folder = tmp_path / "datasets" / info.name
    cfg = {"stage": "sft", "do_train": True, "model_name_or_path": str(tiny_model), "template": "qwen",
           "dataset": info.name, "dataset_dir": str(folder), "finetuning_type": "full", "cutoff_len": 64,
           "per_device_train_batch_size": 4, "max_steps": 2, "logging_steps": 1, "output_dir": str(tmp_path / "out"),
           "overwrite_output_dir": True, "report_to": "none", "use_cpu": True, "save_strategy": "no",
           "overwrite_cache": True, "preprocessing_num_workers": 1, "dataloader_num_workers": 0}
    (tmp_path / "train.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "DISABLE_VERSION_CHECK": "1"}
    proc = subprocess.run([str(tools_env / "bin" / "llamafactory-cli"), "train", str(tmp_path / "train.yaml")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    log = proc.stdout + proc.stderr
    assert "Num examples = 8" in log, log[-3000:]
    state = json.loads((tmp_path / "out" / "trainer_state.json").read_text())
    assert state["global_step"] == 2 and state["log_history"][0]["loss"] > 0


def test_file_with_benchmark_items_stops_before_the_session(tmp_path, files, tools_env):
    rows = generate_rows(n=50, seed=7, exclude=benchmark_pairs())
    items = demo_add_items()  # every pair the benchmark may use; FT_BENCHMARK_LIMIT keeps 10 + 10 of them
    rows[17:17] = [{"instruction": INSTRUCTION.format(a=i["a"], b=i["b"]), "input": "",
                    "output": f"\\boxed{{{i['answer']}}}"} for i in items]
    (tmp_path / "leaky.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    proc = _run(["--dataset", "./leaky.jsonl", "--loop-n", "1"], tmp_path, _env(tmp_path, files, tools_env))
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    errors = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and "rows contain items of the benchmark" in errors[0], errors
    found = re.search(r"(\d+) of (\d+) rows .* \(first: row (\d+), counted from 0", errors[0])
    assert found, errors[0]
    flagged, total, first = map(int, found.groups())
    assert (flagged, total) == (20, 250) and 17 <= first < 217, errors[0]  # FT_BENCHMARK_LIMIT: 10 + 10 items
    assert not [i for i in items if i["question"] in proc.stderr + proc.stdout]  # never the item text
    assert not (tmp_path / "log").exists() or not any((tmp_path / "log").iterdir())
    assert not (files / "datasets" / "leaky").exists()  # the contaminated copy is not kept
