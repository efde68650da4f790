"""Real LLaMA-Factory on CPU with FT_REPORT_TO=tensorboard: the loop's event files hold the training loss
(LLaMA-Factory's TensorBoard callback) and ftagent's validation score (written after evaluation), read
back with TensorBoard's own EventAccumulator in the tool env."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ftagent.core.settings import load_settings
from ftagent.core.types import CodeResult, EvalResult
from ftagent.tools.llamafactory.trainer import LlamaFactoryTrainer
from tests.integration.test_early_stop import EventCtx, lf, validated_workspace  # noqa: F401 - fixture

pytestmark = pytest.mark.integration

READ_EVENTS = r"""
import json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1]); acc.Reload()
print(json.dumps({tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}))
"""


def test_tensorboard_holds_the_loss_and_the_validation_score(lf, tools_python: Path,  # noqa: F811
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    root, scenario, runner = lf
    monkeypatch.setenv("FT_REPORT_TO", "tensorboard")
    settings = load_settings(file_path=str(root / "file_path"))
    ws, report = validated_workspace(root, "tracked", {
        "template": "chatml", "cutoff_len": 64, "finetuning_type": "lora", "lora_rank": 8, "lora_target": "all",
        "learning_rate": 2.0e-3, "per_device_train_batch_size": 16, "max_steps": 20, "logging_steps": 5,
        "save_strategy": "no"}, scenario, settings, runner)
    session_dir = root / "log" / "2026-12-03_tracked"
    ctx = EventCtx(session_dir, session_dir.name, 1)
    trainer = LlamaFactoryTrainer(scenario, settings, runner)
    result = trainer.train(CodeResult(workspace=str(ws)), report, ctx)
    logdir = session_dir / "tensorboard" / "loop_1"
    assert result.config.get("report_to") == "none"  # the validated config is what the loop records
    # after evaluation (the score here is handed in; the workflow passes the real one, unit-tested)
    val = EvalResult(split="validation", benchmark="demo", core_metric="accuracy", score=37.5)
    logged = trainer.log_scores(result, val, ctx, baseline=12.5)
    assert logged is not None and logged.ok, (ws / "logs" / "track_scores.log").read_text()
    out = subprocess.run([str(tools_python), "-c", READ_EVENTS, str(logdir)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    scalars = json.loads(out.stdout.strip().splitlines()[-1])
    print(sorted(scalars))
    losses = scalars["train/loss"]
    assert [s for s, _ in losses] == [5, 10, 15, 20]
    assert [v for _, v in losses] == pytest.approx([p["loss"] for p in result.loss_history if p.get("loss")],
                                                   abs=1e-3)  # float32 in the event file
    assert scalars["ftagent/validation/accuracy"] == [[20, 37.5]]
    assert scalars["ftagent/baseline_validation/accuracy"] == [[20, 12.5]]
    assert not any("test" in tag for tag in scalars)
    assert len(list(logdir.glob("events.out.tfevents.*"))) >= 2  # LLaMA-Factory's file and ftagent's, one run
