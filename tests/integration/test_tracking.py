"""Real LLaMA-Factory on CPU with FT_REPORT_TO=tensorboard: the loop's event files hold the training loss
(LLaMA-Factory's TensorBoard callback) and ftagent's validation score (written after evaluation), read
back with TensorBoard's own EventAccumulator in the tool env. The same for MLflow (its default local
file store under the session, read back with MlflowClient) and wandb (offline, its run files under the
session, read back record by record): issue 32 item 3."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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


READ_MLFLOW = r"""
import json, sys
import mlflow
client = mlflow.MlflowClient()
runs = client.search_runs([client.get_experiment_by_name("ftagent").experiment_id],
                          filter_string=f"tags.mlflow.runName = '{sys.argv[1]}'")
out = {}
for run in runs:
    for key in run.data.metrics:
        out[key] = [[m.step, m.value] for m in client.get_metric_history(run.info.run_id, key)]
print(json.dumps({"runs": len(runs), "metrics": out}))
"""
READ_WANDB = Path(__file__).with_name("read_wandb_offline.py")


@pytest.mark.parametrize("tracker", ["mlflow", "wandb", "mlflow-user-file-uri"])
def test_mlflow_and_wandb_hold_the_loss_and_the_validation_score(tracker: str, lf, tools_python: Path,  # noqa: F811
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """No server, no account: MLflow's file store and wandb's offline files under the session.
    ``mlflow-user-file-uri`` (issue 43): the user's own ``MLFLOW_TRACKING_URI=file:…`` (MLflow 3 refused it
    without ``MLFLOW_ALLOW_FILE_STORE``: the training failed)."""
    root, scenario, runner = lf
    user_store = root / f"user_mlruns_{os.getpid()}" if tracker == "mlflow-user-file-uri" else None
    tracker = tracker.split("-")[0]
    monkeypatch.setenv("FT_REPORT_TO", tracker)
    for name in [k for k in os.environ if k.startswith(("WANDB_", "MLFLOW_"))]:
        monkeypatch.delenv(name)
    if user_store is not None:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", f"file:{user_store}")
    settings = load_settings(file_path=str(root / "file_path"))
    ws, report = validated_workspace(root, f"tracked_{tracker}{'_user' if user_store else ''}", {
        "template": "chatml", "cutoff_len": 64, "finetuning_type": "lora", "lora_rank": 8, "lora_target": "all",
        "learning_rate": 2.0e-3, "per_device_train_batch_size": 16, "max_steps": 10, "logging_steps": 5,
        "save_strategy": "no"}, scenario, settings, runner)
    session_dir = root / "log" / f"2026-12-03_{tracker}{'_user' if user_store else ''}"
    ctx = EventCtx(session_dir, session_dir.name, 1)
    trainer = LlamaFactoryTrainer(scenario, settings, runner)
    result = trainer.train(CodeResult(workspace=str(ws)), report, ctx)
    val = EvalResult(split="validation", benchmark="demo", core_metric="accuracy", score=37.5)
    logged = trainer.log_scores(result, val, ctx, baseline=12.5)
    assert logged is not None and logged.ok, (ws / "logs" / "track_scores.log").read_text()
    losses = [p["loss"] for p in result.loss_history if p.get("loss")]
    assert len(losses) == 2
    if tracker == "mlflow":
        store = user_store or session_dir / "mlruns"
        assert user_store is None or not (session_dir / "mlruns").exists()
        env = {"MLFLOW_TRACKING_URI": store.as_uri(), "MLFLOW_ALLOW_FILE_STORE": "true"}
        out = subprocess.run([str(tools_python), "-c", READ_MLFLOW, f"{session_dir.name}-loop1"], capture_output=True,
                             text=True, timeout=300, env={**os.environ, **env})
        assert out.returncode == 0, out.stderr
        found = json.loads(out.stdout.strip().splitlines()[-1])
        assert found["runs"] == 1  # the scores went into the training's run, not a second one
        metrics = found["metrics"]
        assert [s for s, _ in metrics["loss"]] == [5, 10]
        assert [v for _, v in metrics["loss"]] == pytest.approx(losses, abs=1e-3)
        assert metrics["ftagent_validation_accuracy"] == [[10, 37.5]]
        assert metrics["ftagent_baseline_validation_accuracy"] == [[10, 12.5]]
    else:
        out = subprocess.run([str(tools_python), str(READ_WANDB), str(session_dir / "wandb")], capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        scalars = json.loads(out.stdout.strip().splitlines()[-1])
        assert [s for s, _ in scalars["train/loss"]] == [5, 10]
        assert [v for _, v in scalars["train/loss"]] == pytest.approx(losses, abs=1e-3)
        assert scalars["ftagent/validation/accuracy"] == [[10, 37.5]]
        assert scalars["ftagent/baseline_validation/accuracy"] == [[10, 12.5]]
        runs = sorted(p.name for p in (session_dir / "wandb" / "wandb").glob("offline-run-*"))
        assert len(runs) == 2 and all(f"-{session_dir.name}-loop1" in r for r in runs)  # one id: one run
    assert not any("test" in key for key in (scalars if tracker == "wandb" else metrics))


def test_a_tracker_that_cannot_start_stops_the_session_at_start(tools_env: Path, tmp_path: Path) -> None:
    """Issue 43: a tracker that cannot start was found at the first training (after the whole validate
    step; the loop failed ``[train/CONFIG]`` and the session ended ``completed``). Now the real CLI checks
    it at start-up, in the tool env, before anything is prepared: exit 2 with the tracker's own words."""
    repo = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FT_", "CHAT_", "OPENAI_", "WANDB_", "MLFLOW_"))}
    env.update(PYTHONPATH=str(repo), FT_TOOLS_ENV=str(tools_env), FT_FILE_PATH=str(tmp_path / "files"),
               LOG_PATH=str(tmp_path / "log"), WORKSPACE_PATH=str(tmp_path / "ws"), FT_PLANNER="heuristic",
               FT_ENV_TYPE="local", FT_REPORT_TO="wandb", WANDB_MODE="bogus")
    proc = subprocess.run([sys.executable, "-m", "ftagent", "llm_finetune", "--benchmark", "demo_add",
                           "--base-model", "builtin/tiny-qwen2", "--loop-n", "1"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and "FT_REPORT_TO=wandb: the tracker cannot start" in lines[0], proc.stderr[-2000:]
    assert "Input should be 'online', 'offline'" in lines[0] and "input_value='bogus'" in lines[0]  # wandb's words
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "log").exists() and not (tmp_path / "ws").exists()
    assert not (tmp_path / "files" / "models").exists() and not (tmp_path / "files" / "datasets").exists()
