"""The LLM planner with realistic replies, end to end on CPU (real LLaMA-Factory and OpenCompass).

The scripted server answers like a real model: prose around fenced blocks, an unknown key in the
config, a data script that fails once (wrong file name). The loop must repair the script from the
failure it is shown, train, beat the baseline, and show the next proposal what was actually trained.
"""

from __future__ import annotations

import json

import pytest

from ftagent.finetune.app import FinetuneOptions, run_finetune
from tests.fakes.openai_server import FakeOpenAIServer, Reply

pytestmark = pytest.mark.integration

PROPOSAL_0 = """Looking at the scenario: the base model scores 0.5-0.6 and must learn the boxed format.

```json
{"reason": "The generated rows already use the benchmark's wording, so the fastest win is to train on them.",
 "hypothesis": "[Data] Use the demo_add rows as they are. [Training] Full fine-tuning, lr 1e-3, 600 steps.",
 "task": "1) data: copy the demo_add rows into data.json (100 in debug mode). 2) training: full, chatml, cutoff 64, lr 1e-3, 600 steps, batch 32, warmup ratio 0.08.",
 "skip_data_processing": false}
```
Let me know if you want a different split."""

SCRIPT = """import argparse
import json
import os
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--debug", action="store_true")
args = parser.parse_args()
root = Path(os.environ["FT_DATASETS_DIR"]) / "demo_add"
rows = json.loads((root / "{name}").read_text(encoding="utf-8"))
rows = rows[:100] if args.debug else rows[:5000]
Path("data.json").write_text(json.dumps(rows), encoding="utf-8")
print(f"kept {{len(rows)}} rows; full mode writes about 5000")
"""

CONFIG_0 = """Here is a config that fits the tiny model comfortably:

```yaml
finetuning_type: full
template: chatml
cutoff_len: 64
per_device_train_batch_size: 32
learning_rate: 1.0e-3
max_steps: 600
lr_scheduler_type: cosine
warmup_ratio: 0.08
logging_steps: 10
seed: 2
save_strategy: "no"
use_magic_speedup: true
```

`use_magic_speedup` should make it faster."""

FEEDBACK = """The model learnt the format.

{"reason": "Training on rows in the benchmark's wording taught the boxed answer; the loss fell steadily.",
 "next_step": "Train longer with the same data.", "code_summary": "full fine-tuning, 600 steps"}"""

PROPOSAL_1 = """```json
{"reason": "Loop 0 beat the baseline and its loss was still falling.",
 "hypothesis": "[Data] Keep loop 0's data. [Training] Full fine-tuning, 1200 steps.",
 "task": "1) data: keep the script. 2) training: same config, max_steps 1200.", "skip_data_processing": true}
```"""

CONFIG_1 = CONFIG_0.replace("max_steps: 600", "max_steps: 1200").replace("use_magic_speedup: true\n", "")


@pytest.fixture
def workdir(tmp_path, monkeypatch, tools_env):
    monkeypatch.chdir(tmp_path)
    for key in ("CHAT_MODEL", "OPENAI_API_KEY", "OPENAI_API_BASE", "FT_PLANNER", "CHAT_STREAM"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("FT_FILE_PATH", str(tmp_path / "files"))
    monkeypatch.setenv("LOG_PATH", str(tmp_path / "log"))
    monkeypatch.setenv("WORKSPACE_PATH", str(tmp_path / "ws"))
    monkeypatch.setenv("FT_TOOLS_ENV", str(tools_env))
    monkeypatch.setenv("FT_ENV_TYPE", "local")
    monkeypatch.setenv("FT_ALLOW_UNSANDBOXED", "true")
    return tmp_path


def test_llm_planner_repairs_trains_and_improves(workdir, monkeypatch):
    replies = [
        Reply(PROPOSAL_0),
        Reply("I read the file like this:\n```python\n" + SCRIPT.format(name="train.json") + "```\n"),
        Reply(CONFIG_0),
        Reply("The file is called demo_add_train.json; fixed:\n```python\n"
              + SCRIPT.format(name="demo_add_train.json") + "```\n"),
        Reply(FEEDBACK),
        Reply(PROPOSAL_1),
        Reply(CONFIG_1),
        Reply(FEEDBACK),
    ]
    with FakeOpenAIServer(replies) as server:
        monkeypatch.setenv("CHAT_MODEL", "openai/scripted")
        monkeypatch.setenv("OPENAI_API_BASE", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-relay-000000")
        monkeypatch.setenv("CHAT_STREAM", "true")
        monkeypatch.setenv("FT_BENCHMARK_LIMIT", "30")
        monkeypatch.setenv("FT_STOP_AT_MAXIMUM", "false")  # both loops run, even after a 100 % best
        monkeypatch.setenv("FT_UPPER_DATA_SIZE_LIMIT", "5000")
        # the SOTA bookkeeping below is the point-gain rule's: on 30 items a second loop's gain over the first
        # is rarely significant (FT_SOTA_RULE=interval is exercised by test_agent_loop and test_stats_intervals)
        monkeypatch.setenv("FT_SOTA_RULE", "delta")
        summary = run_finetune(FinetuneOptions(benchmark="demo_add", base_model="builtin/tiny-qwen2", loop_n=2))
        bodies = [r.body["messages"][-1]["content"] for r in server.chat_requests]
    assert summary.status == "completed", summary
    assert len(bodies) == 8  # nothing asked twice: every reply was usable at the first try
    session = next((workdir / "log").iterdir())
    report = json.loads((session / "report.json").read_text())
    assert report["planner"] == "llm"
    loop0 = next(r for r in report["loops"] if r["loop"] == 0)
    assert loop0["val_score"] > report["baseline_val"], report  # loop 0 beats the baseline
    loop1 = next(r for r in report["loops"] if r["loop"] == 1)
    assert loop1["val_score"] is not None and loop1["val_score"] > report["baseline_val"]  # and still trains well
    assert report["best_val"] >= loop0["val_score"]
    # the repair round saw the failure; the config was not asked again for a data failure
    assert "It failed; fix this first" in bodies[3] and "train.json" in bodies[3]
    # the next proposal sees what was trained and what the system changed
    assert "dropped use_magic_speedup (unknown to LLaMA-Factory)" in bodies[5]
    assert "warmup_ratio: 0.08" in bodies[5] and "rows produced by process_data.py" in bodies[5]
    assert "Training loss:" in bodies[5] and "Suggested next step: Train longer" in bodies[5]
    # the trained config is the one asked for (the ratio is not turned into debug-data steps)
    trained = (workdir / "ws").rglob("loop_0/train.yaml")
    import yaml

    assert yaml.safe_load(next(trained).read_text())["warmup_ratio"] == 0.08
    # every request was measured and under its budget
    records = [json.loads(p.read_text()) for p in sorted((session / "llm").glob("*.json"))]
    planner = [r for r in records if r.get("stage") in ("proposal", "data_coder", "config_coder", "feedback")]
    assert len(planner) == 8
    assert all(0 < r["prompt_tokens_measured"] <= r["prompt_budget"] for r in planner)
    print(json.dumps({"baseline": report["baseline_val"], "loops": [(r["loop"], r["val_score"]) for r in report["loops"]],
                      "prompt_tokens": [(r["stage"], r["prompt_tokens_measured"]) for r in planner]}))
