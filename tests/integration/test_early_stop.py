"""Real LLaMA-Factory on CPU: a learning rate that diverges the tiny model is stopped well before its end.

``learning_rate: 100`` on ``builtin/tiny-qwen2`` (full fine-tuning) turns the loss NaN within a few
steps (measured here: 6.26 → 184912 → NaN at step 3 of 300). Without the early stop all 300 steps run;
with transformers' default ``logging_nan_inf_filter`` they are even logged as loss 0.0.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import psutil
import pytest
import yaml

from ftagent.core.errors import ErrorType, StepError
from ftagent.core.settings import load_settings
from ftagent.core.types import CodeResult, ScenarioInfo
from ftagent.runners.local import LocalRunner
from ftagent.tools.llamafactory.catalogue import load_or_build_catalogue
from ftagent.tools.llamafactory.train_run import training_run
from ftagent.tools.llamafactory.trainer import LlamaFactoryTrainer
from ftagent.tools.llamafactory.validator import LlamaFactoryValidator

pytestmark = pytest.mark.integration
STEPS = 300


def arithmetic_rows(n: int = 400, seed: int = 0) -> list[dict]:
    """Alpaca rows ``What is a + b?`` → ``\\boxed{a+b}``."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        rows.append({"instruction": f"What is {a} + {b}?", "input": "", "output": f"\\boxed{{{a + b}}}"})
    return rows


class EventCtx:
    """A step context for a trainer used on its own: collects events, no deadline, a session folder."""

    def __init__(self, session_dir: Path, session_id: str, loop: int) -> None:
        self.session = type("Session", (), {"dir": session_dir})()
        self.state = type("State", (), {"session_id": session_id})()
        self.loop = type("Loop", (), {"index": loop})()
        self.events: list = []

    def emit(self, event) -> None:
        self.events.append(event)

    def limit(self, seconds: float) -> float:
        return seconds


def validated_workspace(root: Path, name: str, config: dict, scenario: ScenarioInfo, settings, runner):
    """A workspace with data.json and train.yaml, passed through the real validator (micro-batch run)."""
    ws = root / name
    ws.mkdir(parents=True)
    (ws / "data.json").write_text(json.dumps(arithmetic_rows()))
    (ws / "train.yaml").write_text(yaml.safe_dump(config))
    report = LlamaFactoryValidator(scenario, settings, runner=runner).validate(CodeResult(workspace=str(ws)), None)
    assert report.passed, report.failure
    return ws, report


@pytest.fixture(scope="module")
def lf(tiny_model: Path, tools_env: Path, tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("early_stop")
    runner = LocalRunner(tools_env, sandbox="auto", gpu=False)
    info = root / "file_path" / ".llama_factory_info"
    load_or_build_catalogue(info, runner)
    scenario = ScenarioInfo(benchmark="demo", base_model="builtin/tiny-qwen2", base_model_path=str(tiny_model),
                            file_path=str(root / "file_path"), workspace_root=str(root),
                            llama_factory_info_dir=str(info))
    return root, scenario, runner


def _llamafactory_processes(workspace: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info.get("cmdline") or [])
        if "llamafactory" in cmdline and str(workspace) in cmdline:
            found.append(proc)
    return found


def test_a_diverging_learning_rate_is_stopped_early(lf, monkeypatch: pytest.MonkeyPatch) -> None:
    root, scenario, runner = lf
    monkeypatch.delenv("FT_EARLY_STOP", raising=False)
    settings = load_settings(file_path=str(root / "file_path"))
    ws, report = validated_workspace(root, "diverge", {
        "template": "chatml", "cutoff_len": 64, "finetuning_type": "full", "learning_rate": 1.0e-3,
        "lr_scheduler_type": "constant", "per_device_train_batch_size": 8, "max_steps": STEPS,
        "logging_steps": 1, "save_strategy": "no"}, scenario, settings, runner)
    # a run that passed its micro-batch and diverges at full scale (lr 100 fails validation itself now,
    # test_training.py::test_a_diverging_micro_batch_fails_validation): raise lr in the validated config
    validated = Path(report.config_path or ws / "train.yaml")
    config = yaml.safe_load(validated.read_text())
    validated.write_text(yaml.safe_dump({**config, "learning_rate": 100.0}))
    ctx = EventCtx(root / "log" / "sess", "sess", 0)
    start = time.monotonic()
    with pytest.raises(StepError) as err:
        LlamaFactoryTrainer(scenario, settings, runner).train(CodeResult(workspace=str(ws)), report, ctx)
    took = time.monotonic() - start
    exc = err.value
    facts = exc.details["early_stop"]
    print(f"stopped at step {facts['step']}/{STEPS} after {took:.1f}s; estimated saved {facts['saved_s']}s")
    assert exc.error_type is ErrorType.DIVERGED
    step = facts["step"]
    assert 2 <= step <= 10, exc.message  # measured: 3
    assert exc.message.startswith(f"training diverged at step {step}/{STEPS}: loss nan, lr 100 ")
    assert "stopped" in exc.message and "learning_rate" in exc.suggestion
    assert facts["stopped"] is True and facts["saved_s"] > 0
    # the logs are kept: trainer_log.jsonl up to (a little past) the stop, train.log with the stop line
    run = training_run(ws)  # the training's own folder beside the workspace (issue 39, red team B1/B2)
    points = [json.loads(line) for line in (run.output / "trainer_log.jsonl").read_text().splitlines()]
    assert points[0]["loss"] > 1 and step <= len(points) < STEPS // 2
    assert "[ftagent] stopped on request" in (ws / "logs" / "train.log").read_text()
    assert not (run.output / "model.safetensors").exists()  # no model of a diverged run
    assert not _llamafactory_processes(run.root)  # the process group is gone (its config is run.inputs')
    event = next(e for e in ctx.events if getattr(e, "type", "") == "training")
    assert event.early_stop is not None and event.early_stop.step == step and event.loss_history
    run_config = yaml.safe_load((run.inputs / "train.yaml").read_text())
    assert run_config["logging_nan_inf_filter"] is False and run_config["learning_rate"] == 100.0
