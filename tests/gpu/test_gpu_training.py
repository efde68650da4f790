"""What the CPU machines cannot check: GPU facts, GPU training, Docker with GPUs, tensor parallel."""

from __future__ import annotations

import json
import random
import shutil

import pytest
import yaml

pytestmark = pytest.mark.gpu


def test_gpu_facts_are_per_gpu():
    from ftagent.core.hardware import detect_gpus

    info = detect_gpus()
    assert info.gpu_count >= 1 and info.per_gpu_memory_gb > 1
    assert info.total_memory_gb == pytest.approx(sum(g.memory_total_gb for g in info.gpus), rel=1e-6)


def test_memory_estimate_uses_the_real_gpu(tiny_model):
    import psutil

    from ftagent.core.hardware import detect_gpus
    from ftagent.tools.llamafactory.memory import estimate_for_hardware

    report = estimate_for_hardware(tiny_model, detect_gpus(), cpu_ram_gb=psutil.virtual_memory().total / 1e9)
    assert report.device == "gpu" and report.get("full").fits


def _workspace(tmp_path, tiny_model, finetuning_type):
    rng = random.Random(0)
    rows = []
    for _ in range(256):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        rows.append({"instruction": f"What is {a} + {b}?", "input": "", "output": f"\\boxed{{{a + b}}}"})
    ws = tmp_path / finetuning_type
    ws.mkdir()
    (ws / "data.json").write_text(json.dumps(rows))
    (ws / "train.yaml").write_text(yaml.safe_dump({
        "stage": "sft", "do_train": True, "finetuning_type": finetuning_type, "template": "chatml",
        "cutoff_len": 64, "per_device_train_batch_size": 32, "learning_rate": 1e-3, "max_steps": 30,
        "logging_steps": 5, "save_strategy": "no", "bf16": True}))
    return ws


@pytest.mark.parametrize("finetuning_type", ["full", "lora"])
def test_training_on_gpu(tools_env, tiny_model, tmp_path, finetuning_type):
    from ftagent.core.hardware import detect_gpus
    from ftagent.core.settings import load_settings
    from ftagent.core.types import CodeResult, ScenarioInfo
    from ftagent.runners.local import LocalRunner
    from ftagent.tools.llamafactory.trainer import LlamaFactoryTrainer
    from ftagent.tools.llamafactory.validator import LlamaFactoryValidator

    settings = load_settings(file_path=tmp_path / "ft")
    runner = LocalRunner(tools_env, gpu=True)
    scenario = ScenarioInfo(benchmark="demo_add", base_model="builtin/tiny-qwen2", base_model_path=str(tiny_model),
                            file_path=str(tmp_path / "ft"), workspace_root=str(tmp_path),
                            hardware=detect_gpus().model_dump())
    ws = _workspace(tmp_path, tiny_model, finetuning_type)
    code = CodeResult(workspace=str(ws), files={"train.yaml": str(ws / "train.yaml")})
    report = LlamaFactoryValidator(scenario, settings, runner).validate(code, None)
    assert report.passed, report.failure
    cfg = yaml.safe_load((ws / "train.yaml").read_text())
    assert not cfg.get("disable_gradient_checkpointing")  # CPU-only settings are not applied on GPU
    result = LlamaFactoryTrainer(scenario, settings, runner).train(code, report, None)
    assert result.loss_history and result.loss_history[-1]["loss"] < result.loss_history[0]["loss"]


@pytest.mark.skipif(shutil.which("docker") is None, reason="needs a Docker engine")
def test_docker_runner_sees_the_gpu(tmp_path):
    from ftagent.runners.docker import DockerRunner

    runner = DockerRunner()
    result = runner.run(["nvidia-smi", "-L"], tool="train", workdir=tmp_path, gpus="0", timeout=600,
                        log_file=tmp_path / "docker.log")
    assert result.ok and "GPU 0" in (tmp_path / "docker.log").read_text()


def test_tensor_parallel_auto_uses_visible_gpus(tiny_model):
    from ftagent.core.hardware import detect_gpus
    from ftagent.tools.launch.profiles import profile_of
    from ftagent.tools.opencompass.inference import read_model_config, tensor_parallel_size

    info = detect_gpus()
    n = info.gpu_count
    tp = tensor_parallel_size("auto", n, read_model_config(tiny_model), per_gpu_memory_gb=profile_of(info).memory_gb)
    assert tp >= 1 and tp <= n and (tp & (tp - 1)) == 0
