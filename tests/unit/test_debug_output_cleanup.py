"""The validate step's micro-batch leaves no model weights behind (issue 30, finding 9).

LLaMA-Factory saves the model at the end of every run, the micro-batch's too (a full 7B copy per
loop). The runner here is fake: it writes what a real micro-batch writes into ``output_dir``.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from ftagent.core.settings import load_settings
from ftagent.core.types import CodeResult, ScenarioInfo
from ftagent.runners.base import RunResult
from ftagent.tools.llamafactory.catalogue import read_catalogue
from ftagent.tools.llamafactory.debug_output import drop_weights
from ftagent.tools.llamafactory.validator import LlamaFactoryValidator

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llamafactory"
KEPT = ("trainer_state.json", "trainer_log.jsonl", "all_results.json", "train_results.json", "config.json",
        "adapter_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "README.md",
        "runs/Dec05/events.out.tfevents.1.host")
WEIGHTS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
           "model.safetensors.index.json", "adapter_model.safetensors", "pytorch_model.bin", "training_args.bin",
           "checkpoint-2/model.safetensors", "checkpoint-2/optimizer.pt", "checkpoint-2/trainer_state.json",
           "global_step3/mp_rank_00_model_states.pt", "global_step3/zero_pp_rank_0_optim_states.pt")


def _fake_output(out: Path, weight_bytes: int = 1000) -> None:
    """What a LoRA/full micro-batch with ZeRO leaves in its output_dir (sizes made small)."""
    state = {"global_step": 3, "log_history": [{"step": s, "loss": 2.0 - s / 10} for s in (1, 2, 3)]
             + [{"step": 3, "train_runtime": 1.5}]}
    for name in KEPT:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(json.dumps(state) if name == "trainer_state.json" else "{}")
    for name in WEIGHTS:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(b"w" * weight_bytes)


def test_drop_weights_keeps_logs_and_configs(tmp_path: Path) -> None:
    out = tmp_path / "debug" / "output"
    _fake_output(out)
    outside = tmp_path / "base" / "model.safetensors"  # a link's target is never touched
    outside.parent.mkdir()
    outside.write_bytes(b"base")
    (out / "linked.safetensors").symlink_to(outside)
    freed = drop_weights(out)
    assert freed >= 1000 * len(WEIGHTS)
    left = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert left == sorted(KEPT)
    assert not (out / "checkpoint-2").exists() and not (out / "global_step3").exists()
    assert not (out / "linked.safetensors").is_symlink() and outside.read_bytes() == b"base"
    assert drop_weights(out) == 0 and drop_weights(tmp_path / "missing") == 0


class _MicroBatchRunner:
    """Writes a micro-batch's output (loss history + weights) where train_micro.yaml says."""

    name = "fake"

    def run(self, cmd, *, tool, workdir, env=None, mounts=None, gpus=None, timeout=None, log_file=None, stop=None):
        config = yaml.safe_load(Path(cmd[-1]).read_text())
        out = Path(config["output_dir"])
        out.mkdir(parents=True, exist_ok=True)
        _fake_output(out, weight_bytes=2**20)
        if log_file:
            Path(log_file).write_text("{'loss': 1.9}\n")
        return RunResult(exit_code=0, duration_s=0.1, log_file=str(log_file) if log_file else None)


def test_validate_removes_the_micro_batch_weights(tmp_path: Path) -> None:
    scen = ScenarioInfo(benchmark="demo", base_model="builtin/tiny-qwen2", base_model_path="/models/tiny",
                        file_path=str(tmp_path), workspace_root=str(tmp_path))
    validator = LlamaFactoryValidator(scen, load_settings(file_path=str(tmp_path)), runner=_MicroBatchRunner(),
                                      catalogue=read_catalogue(FIXTURES))
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "data.json").write_text(json.dumps([{"instruction": "1+1?", "input": "", "output": "2"}] * 4))
    (ws / "train.yaml").write_text(yaml.safe_dump({"learning_rate": 1e-4, "finetuning_type": "lora"}))
    report = validator.validate(CodeResult(workspace=str(ws)), None)
    assert report.passed, report.failure
    out = tmp_path / "validate" / "ws" / "micro" / "run" / "output"  # its own folder beside the workspace (issue 39)
    assert report.micro_batch["output_dir"] == str(out) and not (ws / "debug" / "output").exists()
    assert report.micro_batch["losses"] == [1.9, 1.8, 1.7]
    assert not list(out.rglob("*.safetensors")) and not list(out.rglob("*.pt")) and not list(out.rglob("*.bin"))
    assert report.micro_batch["weights_removed_mb"] >= len(WEIGHTS)
    # what later steps read is still there (the forecast reads trainer_state.json)
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 3
    assert (out / "trainer_log.jsonl").is_file()
