"""Issue 42 item 2: every validated train.yaml passes the same preflight — upstream's refusals of its keys on
the session's GPUs — before the micro-batch, and ``ftagent plan --train-config FILE`` runs it on a file.

The validator runs for real (LLaMA-Factory's parameter catalogue, the system-managed keys, the DeepSpeed
config the memory plan names) on a scenario planned for 8 x H100 from Qwen2.5-7B's real config.json, with a
recording runner: a refused train.yaml is a CONFIG failure in upstream's words and the micro-batch never
starts. On d350dfe each of these train.yamls passed validation on a GPU machine and died later: the
micro-batch forces ``load_best_model_at_end`` off, so that one only in the full run, one loop lost.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ftagent.core.errors import ErrorType
from ftagent.core.hardware import GPUInfo, HardwareInfo
from ftagent.core.settings import load_settings
from ftagent.core.types import CodeResult, ScenarioInfo
from ftagent.finetune.hardware_plan import session_plan
from ftagent.tools.llamafactory.catalogue import read_catalogue
from ftagent.tools.llamafactory.validator import LlamaFactoryValidator
from ftagent.tools.opencompass.inference import inference_settings

REPO = Path(__file__).resolve().parents[2]
CATALOGUE = REPO / "tests" / "fixtures" / "llamafactory"
QWEN7B = REPO / "tests" / "fixtures" / "model_configs" / "Qwen__Qwen2.5-7B" / "config.json"
ROW = {"instruction": "What is 2 + 3?", "input": "", "output": "5"}
FULL = {"stage": "sft", "do_train": True, "finetuning_type": "full", "template": "qwen", "cutoff_len": 1024,
        "learning_rate": 1e-5, "num_train_epochs": 1.0, "per_device_train_batch_size": 1}


def _gpus(n: int, name: str = "NVIDIA H100 80GB HBM3", mib: int = 81559, cc=(9, 0)) -> HardwareInfo:
    total = mib * 2**20
    return HardwareInfo(gpus=[GPUInfo(index=i, name=name, memory_total_gb=round(total / 2**30, 2), memory_used_gb=0,
                                      memory_total_bytes=total, compute_capability=cc) for i in range(n)])


class _Recorder:
    name = "recorder"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def run(self, cmd, **_kw):
        from ftagent.runners.base import RunResult

        self.calls.append(list(cmd))
        return RunResult(exit_code=1, duration_s=0.0)


def _scenario(tmp_path: Path, hardware: HardwareInfo) -> ScenarioInfo:
    model = tmp_path / "Qwen2.5-7B"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(QWEN7B.read_text(encoding="utf-8"), encoding="utf-8")
    plan = session_plan(model, hardware, name="Qwen/Qwen2.5-7B", inference=inference_settings("Qwen/Qwen2.5-7B"),
                        cpu_ram_gb=256, settings=load_settings(file_path=str(tmp_path / "ft")))
    assert plan is not None
    return ScenarioInfo(benchmark="demo", base_model="Qwen/Qwen2.5-7B", base_model_path=str(model),
                        file_path=str(tmp_path / "ft"), workspace_root=str(tmp_path), hardware=hardware,
                        memory=plan.memory.model_dump(mode="json"), launch_plan=plan.model_dump(mode="json"))


def _validate(tmp_path: Path, scenario: ScenarioInfo, train: dict):
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    (ws / "data.json").write_text(json.dumps([ROW] * 8), encoding="utf-8")
    (ws / "train.yaml").write_text(yaml.safe_dump(train), encoding="utf-8")
    runner = _Recorder()
    validator = LlamaFactoryValidator(scenario, load_settings(file_path=str(tmp_path / "ft")), runner,
                                      catalogue=read_catalogue(CATALOGUE))
    return validator.validate(CodeResult(workspace=str(ws)), None), runner


CASES = [  # (keys added to a full fine-tune, upstream's words, where they come from)
    ({"load_best_model_at_end": True, "eval_strategy": "steps", "save_strategy": "steps", "val_size": 0.1},
     "DeepSpeed can't be used with `save_only_model` along with `load_best_model_at_end`.", "trainer.py"),
    ({"auto_find_batch_size": True}, "`auto_find_batch_size` isn't supported yet with DeepSpeed Zero-3.", "trainer.py"),
    ({"pure_bf16": True}, "`pure_bf16` is incompatible with DeepSpeed ZeRO-3.", "hparams/parser.py"),
    ({"use_galore": True}, "GaLore and APOLLO are incompatible with DeepSpeed yet.", "hparams/parser.py"),
    ({"use_apollo": True}, "GaLore and APOLLO are incompatible with DeepSpeed yet.", "hparams/parser.py"),
    ({"predict_with_generate": True, "val_size": 0.1},
     "`predict_with_generate` is incompatible with DeepSpeed ZeRO-3.", "hparams/parser.py"),
]


@pytest.mark.parametrize(("keys", "words", "source"), CASES)
def test_a_train_yaml_upstream_refuses_goes_back_to_the_coder(tmp_path: Path, keys: dict, words: str,
                                                              source: str) -> None:
    scenario = _scenario(tmp_path, _gpus(8))
    assert scenario.launch_plan["deepspeed"] == "ds_z3_config.json"  # full fine-tuning over ZeRO-3
    report, runner = _validate(tmp_path, scenario, {**FULL, **keys})
    assert not report.passed and report.failure is not None
    assert report.failure.error_type == ErrorType.CONFIG and report.failure.stage == "validate"
    assert words in report.failure.message and source in report.failure.message
    assert report.failure.suggestion.startswith("Change train.yaml: drop ")
    assert not any(c[:2] == ["llamafactory-cli", "train"] for c in runner.calls)  # no micro-batch started


def test_the_same_train_yaml_without_them_passes_the_preflight(tmp_path: Path) -> None:
    report, runner = _validate(tmp_path, _scenario(tmp_path, _gpus(8)), FULL)
    # past the preflight: the micro-batch ran (and failed: the recording runner trains nothing)
    assert any(c[:2] == ["llamafactory-cli", "train"] for c in runner.calls)
    assert "would be refused" not in (report.failure.message if report.failure else "")


def test_lora_on_one_gpu_keeps_what_only_deepspeed_forbids(tmp_path: Path) -> None:
    """No DeepSpeed (LoRA on one H100): load_best_model_at_end and GaLore are LLaMA-Factory's business."""
    lora = {**FULL, "finetuning_type": "lora", "lora_rank": 16, "load_best_model_at_end": True,
            "eval_strategy": "steps", "save_strategy": "steps", "val_size": 0.1}
    report, runner = _validate(tmp_path, _scenario(tmp_path, _gpus(1)), lora)
    assert any(c[:2] == ["llamafactory-cli", "train"] for c in runner.calls)


def test_pure_bf16_on_a_gpu_without_bf16(tmp_path: Path) -> None:
    report, _ = _validate(tmp_path, _scenario(tmp_path, _gpus(1, "Tesla V100-PCIE-32GB", 32480, (7, 0))),
                          {**FULL, "finetuning_type": "lora", "pure_bf16": True})
    assert report.failure and "This device does not support `pure_bf16`." in report.failure.message


def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FT_", "CHAT_", "OPENAI_"))}
    env.update({"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "FT_FILE_PATH": str(cwd / "files"),
                "CUDA_VISIBLE_DEVICES": ""})
    return subprocess.run([sys.executable, "-m", "ftagent", "plan", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_plan_train_config_checks_a_file(tmp_path: Path) -> None:
    model = tmp_path / "qwen7b"
    model.mkdir()
    (model / "config.json").write_text(QWEN7B.read_text(encoding="utf-8"), encoding="utf-8")
    bad = tmp_path / "train.yaml"
    bad.write_text(yaml.safe_dump({**FULL, "pure_bf16": True, "auto_find_batch_size": True}), encoding="utf-8")
    res = _cli(["--hardware", "8xH100", "--base-model", str(model), "--train-config", str(bad)], tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "[refused] pure_bf16:" in res.stdout and "[refused] auto_find_batch_size:" in res.stdout
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(FULL), encoding="utf-8")
    res = _cli(["--hardware", "8xH100", "--base-model", str(model), "--train-config", str(good), "--json"], tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert [v["status"] for v in json.loads(res.stdout)["train_config"]] == ["ok"] * len(
        json.loads(res.stdout)["train_config"])
    missing = _cli(["--hardware", "8xH100", "--base-model", str(model), "--train-config", str(tmp_path / "no.yaml")],
                   tmp_path)
    assert missing.returncode == 2 and "--train-config" in missing.stderr and "Traceback" not in missing.stderr
