"""Issue 40 on CPU: the offline planner leaves SFT once it plateaus — SFT → SFT (no gain) → DPO → GRPO.

One session of the real CLI entry (``run_finetune``: ``builtin/tiny-qwen2``, ``demo_add``, the offline planner,
the default ``FT_STAGES=sft,dpo,grpo``, four loops, 10 benchmark items, 2,000 training rows):

* loop 0: the SFT probe (600 steps here: enough for the tiny model to learn the task, ~95 % validation);
* loop 1: the planner's next SFT recipe. SFT is capped at the probe's length (``MAX_STEPS_CAP``), so it trains
  the same recipe on the same data and cannot beat loop 0 significantly: a plateau by construction, as a
  user's session reaches one when training longer stops helping;
* loop 2: the first preference stage, DPO from loop 0's weights on pairs of its own samples;
* loop 3: GRPO from loop 0's weights (its sampling found right answers: the reward is not 0 everywhere).

Then the report (and the UI's loop panel) states each stage, its start weights and its interval against the SOTA
whatever it is (a loss is a result too), and ``ftagent export`` of the GRPO loop (a LoRA adapter on loop 0's full weights) writes
merged weights and a card naming the chain sft → grpo, with ``reproduce/`` rebuilding it step by step.

Cost is kept down as in tests/integration/test_stage_sessions.py: the offline planner's sampling (32 prompts ×
4 answers) and GRPO run (20 steps) are shortened here; the recipes are otherwise the planner's own. Measured
2026-12-06 on the shared 2-core machine (load average 10-12): 1,928 s, of which the two SFT loops 1,017 s
(test_stage_sessions.py took 624 s beside it). Its first run found the chained LoRA flagged by the integrity
guard (tests/unit/test_stage_integrity.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from ftagent.core.types import SamplingPlan
from ftagent.engine.events import read_events
from ftagent.finetune.app import FinetuneOptions, run_finetune
from ftagent.ui.frames import stage_text
from ftagent.views.session import load_session

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
PROBE_STEPS = 600


@pytest.fixture
def plateau_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tools_env: Path) -> tuple[Path, Path, float]:
    import ftagent.planners.heuristic.policy as heuristic
    import ftagent.planners.heuristic.stages as stages

    monkeypatch.chdir(tmp_path)
    for key in ("CHAT_MODEL", "OPENAI_API_KEY", "OPENAI_API_BASE", "CHAT_STREAM", "FT_STAGES"):
        monkeypatch.delenv(key, raising=False)
    for key, value in {"FT_FILE_PATH": tmp_path / "files", "LOG_PATH": tmp_path / "log",
                       "WORKSPACE_PATH": tmp_path / "ws", "FT_TOOLS_ENV": tools_env, "FT_ENV_TYPE": "local",
                       "FT_PLANNER": "heuristic", "FT_BENCHMARK_LIMIT": 10, "FT_UPPER_DATA_SIZE_LIMIT": 2000,
                       "FT_FINAL_EVAL": "none", "FT_STOP_AT_MAXIMUM": "false"}.items():
        monkeypatch.setenv(key, str(value))
    monkeypatch.setattr(heuristic, "PROBE_STEPS", PROBE_STEPS)
    monkeypatch.setattr(heuristic, "MAX_STEPS_CAP", PROBE_STEPS)
    monkeypatch.setattr(stages, "TINY_SAMPLING", SamplingPlan(samples_per_prompt=4, temperature=1.0, max_prompts=32))
    monkeypatch.setitem(stages.TINY_STEPS, "grpo", 20)
    t0 = time.monotonic()
    summary = run_finetune(FinetuneOptions(benchmark="demo_add", base_model="builtin/tiny-qwen2", loop_n=4))
    assert summary.status == "completed" and summary.loops_done == 4, summary
    (session,) = (tmp_path / "log").iterdir()
    return session, tmp_path, time.monotonic() - t0


def test_an_sft_plateau_is_followed_by_dpo_then_grpo_each_reported_against_the_sota(plateau_session) -> None:
    session, root, took = plateau_session
    report = json.loads((session / "report.json").read_text())
    rows = {row["loop"]: row for row in report["loops"]}
    assert [rows[i]["config"]["stage"] for i in range(4)] == ["sft", "sft", "dpo", "grpo"], rows
    assert rows[0]["decision"] and not rows[1]["decision"], (rows[0]["verdict"], rows[1]["verdict"])
    hypotheses = {e.loop: e for e in read_events(session / "events.jsonl") if e.type == "hypothesis"}
    assert "SFT has plateaued" in hypotheses[2].reason and hypotheses[2].weights_from == 0, hypotheses[2]
    best = 2 if rows[2]["decision"] else 0  # GRPO starts from the best weights: loop 0's unless DPO beat them
    assert hypotheses[3].stage == "grpo" and hypotheses[3].weights_from == best, hypotheses[3]
    assert "answered" in hypotheses[3].reason and "training prompts right" in hypotheses[3].reason
    assert rows[2]["chain"] == ["sft", "dpo"] and rows[3]["chain"] == rows[best]["chain"] + ["grpo"], (rows[2], rows[3])
    sampled = {e.loop: e for e in read_events(session / "events.jsonl") if e.type == "sampling"}
    assert sampled[2].start_loop == 0 and sampled[2].samples == 4 * sampled[2].prompts and sampled[2].correct > 0
    for loop in (2, 3):  # its result against the SOTA, with its interval, whichever way it went
        row = rows[loop]
        assert row["status"] == "succeeded" and row["val_score"] is not None and row["test_score"] is not None
        vs_sota = [d for d in row["intervals"] if d["against"] == "SOTA" and d["split"] == "validation"]
        assert vs_sota and vs_sota[0]["low"] is not None and vs_sota[0]["low"] <= vs_sota[0]["diff"] <= vs_sota[0]["high"]
        assert f"vs loop {0 if loop == 2 else best}" in row["verdict"], row["verdict"]
    training = {e.loop: e for e in read_events(session / "events.jsonl") if e.type == "training"}
    rewards = [json.loads(line).get("reward") for line in
               (Path(training[3].output_dir) / "trainer_log.jsonl").read_text().splitlines()]
    assert any(r for r in rewards if r), rewards  # loop 0's weights answer some prompts right: a reward signal
    md = (session / "report.md").read_text(encoding="utf-8")
    assert "stage=dpo" in md and "stage=grpo" in md
    ui = {lp.index: lp for lp in load_session(session).loops}  # the UI's loop panel, from the same events
    assert stage_text(ui[2]).startswith("**Stage**: dpo, from loop 0's weights (chain sft → dpo); sampled "), \
        stage_text(ui[2])
    assert stage_text(ui[1]).startswith("**Stage**: sft, from the base model")
    print(json.dumps({"session_s": round(took), "baseline": report["baseline_val"],
                      "loops": [(r["loop"], r["config"]["stage"], r["val_score"], r["verdict"]) for r in rows.values()],
                      "sampling": sampled[2].model_dump(include={"prompts", "samples", "correct", "prompts_mixed"}),
                      "grpo_rewards": rewards}))
    _check_export(session, root, rows[3]["chain"])


def _check_export(session: Path, root: Path, chain: list[str]) -> None:
    """``ftagent export`` of the GRPO loop: merged weights, a card naming sft → grpo, reproduce/ step by step."""
    out = root / "export"
    res = subprocess.run([sys.executable, "-m", "ftagent", "export", str(session), "--loop", "3", "--to", str(out)],
                         cwd=root, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                         timeout=900)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    assert (out / "model.safetensors").is_file() and not (out / "adapter_config.json").exists()
    card = (out / "README.md").read_text(encoding="utf-8")
    loops = [0, 2, 3] if chain == ["sft", "dpo", "grpo"] else [0, 3]
    assert "**" + " → ".join(f"{s} (loop {n})" for s, n in zip(chain, loops, strict=True)) + "**" in card, card
    steps = [f"{i}_{n}_{s}" for i, (s, n) in enumerate(zip(chain, loops, strict=True), 1)]
    configs = [yaml.safe_load((out / "reproduce" / step / "train.yaml").read_text()) for step in steps]
    assert [c["stage"] for c in configs] == chain and configs[0]["model_name_or_path"] == "../base_model"
    assert configs[-1]["model_name_or_path"] == f"../{steps[-2]}/output"  # the full weights before it
    repro = out / "reproduce"
    assert "grpo_script.py" in (repro / "run.sh").read_text(encoding="utf-8")
    assert str(root) not in card
