"""GPU launch plan: DeepSpeed injection per memory plan, the torchrun env, the visible GPU set.

The validator and the trainer run against a recording runner: what they would launch is checked on
the arguments the runner receives (config file, environment, ``gpus``), no GPU needed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ftagent.core.hardware import GPUInfo, HardwareInfo
from ftagent.core.settings import load_settings
from ftagent.core.types import CodeResult, ScenarioInfo
from ftagent.runners.base import RunResult
from ftagent.tools.llamafactory.catalogue import read_catalogue
from ftagent.tools.llamafactory.launch import apply_deepspeed, deepspeed_source, launch_env, visible_gpus
from ftagent.tools.llamafactory.memory import DS_Z2, DS_Z3, estimate_memory, model_spec
from ftagent.tools.llamafactory.trainer import LlamaFactoryTrainer
from ftagent.tools.llamafactory.validator import LlamaFactoryValidator

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llamafactory"
ROW = {"instruction": "What is 2 + 3?", "input": "", "output": "\\boxed{5}"}


def _hw(n: int, cvd: str | None = None) -> HardwareInfo:
    gpus = [GPUInfo(index=i, name="H100", memory_total_gb=74.5, memory_used_gb=0.5) for i in range(n)]
    return HardwareInfo(gpus=gpus, cuda_visible_devices=cvd)


def _memory_7b(n: int) -> dict:
    return estimate_memory(model_spec("Qwen/Qwen2.5-7B-Instruct"), 80, n, cpu_ram_gb=512).model_dump(mode="json")


def test_plan_injects_zero3_for_7b_full_on_2x80(tmp_path: Path) -> None:
    final, notes = apply_deepspeed({"finetuning_type": "full"}, memory=_memory_7b(2), hardware=_hw(2), workspace=tmp_path)
    path = Path(final["deepspeed"])
    assert path == tmp_path / DS_Z3 and path.is_absolute()
    assert json.loads(path.read_text()) == json.loads(deepspeed_source(DS_Z3).read_text())
    assert json.loads(path.read_text())["zero_optimization"]["stage"] == 3
    assert notes == [f"deepspeed: {DS_Z3} (the memory plan for this method)"]
    # the planner's weaker choice is overruled by the plan (ZeRO-2 keeps full weights on each GPU)
    final, notes = apply_deepspeed({"finetuning_type": "full", "deepspeed": "examples/deepspeed/ds_z2_config.json"},
                                   memory=_memory_7b(2), hardware=_hw(2), workspace=tmp_path)
    assert Path(final["deepspeed"]).name == DS_Z3 and "instead of examples/deepspeed/ds_z2_config.json" in notes[0]


def test_plan_without_deepspeed_keeps_a_shipped_choice_and_drops_others(tmp_path: Path) -> None:
    lora = {"finetuning_type": "lora"}
    final, notes = apply_deepspeed(lora, memory=_memory_7b(2), hardware=_hw(2), workspace=tmp_path)
    assert "deepspeed" not in final and notes == []
    final, _ = apply_deepspeed({**lora, "deepspeed": "ds_z2_config.json"}, memory=_memory_7b(2), hardware=_hw(2),
                               workspace=tmp_path)
    assert final["deepspeed"] == str(tmp_path / DS_Z2) and (tmp_path / DS_Z2).is_file()
    final, notes = apply_deepspeed({**lora, "deepspeed": "/etc/my_ds.json"}, memory=_memory_7b(2), hardware=_hw(2),
                                   workspace=tmp_path)
    assert "deepspeed" not in final and "not one of the shipped configs" in notes[0]
    final, notes = apply_deepspeed({"finetuning_type": "full", "deepspeed": "ds_z3_config.json"}, memory={},
                                   hardware=HardwareInfo(), workspace=tmp_path)
    assert "deepspeed" not in final and "no GPU" in notes[0]
    # one GPU that holds the whole model: no DeepSpeed for full fine-tuning
    small = estimate_memory(model_spec("Qwen2.5-0.5B"), 80, 1).model_dump(mode="json")
    final, _ = apply_deepspeed({"finetuning_type": "full"}, memory=small, hardware=_hw(1), workspace=tmp_path)
    assert "deepspeed" not in final


def test_torchrun_env() -> None:
    assert launch_env(_hw(2), {"finetuning_type": "lora"}) == {"FORCE_TORCHRUN": "1", "NPROC_PER_NODE": "2"}
    assert launch_env(_hw(4, "4,5,6,7"), {}) == {"FORCE_TORCHRUN": "1", "NPROC_PER_NODE": "4"}
    # LLaMA-Factory refuses DeepSpeed without torchrun, even on one GPU
    assert launch_env(_hw(1), {"deepspeed": "/w/ds_z3_offload_config.json"}) == {
        "FORCE_TORCHRUN": "1", "NPROC_PER_NODE": "1"}
    assert launch_env(_hw(1), {"finetuning_type": "full"}) == {}
    assert launch_env(HardwareInfo(), {"deepspeed": "x"}) == {}
    assert launch_env(_hw(2).model_dump(mode="json"), {}) == {"FORCE_TORCHRUN": "1", "NPROC_PER_NODE": "2"}
    assert visible_gpus(_hw(2, "2,3")) == "2,3" and visible_gpus(_hw(2)) is None
    assert visible_gpus(HardwareInfo(cuda_visible_devices="")) is None


class _Recorder:
    """A runner that records each call and writes a finite loss where LLaMA-Factory would."""

    name = "recorder"

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def run(self, cmd, *, tool, workdir, env=None, mounts=None, gpus=None, timeout=None, log_file=None):
        if cmd[0] != "llamafactory-cli":  # the template probe: not run here (tests/unit/test_template_check.py)
            return RunResult(exit_code=1, duration_s=0.0)
        config = yaml.safe_load(Path(cmd[-1]).read_text())
        self.calls.append({"cmd": cmd, "tool": tool, "env": dict(env or {}), "gpus": gpus, "config": config})
        out = Path(config["output_dir"])
        out.mkdir(parents=True, exist_ok=True)
        (out / "trainer_log.jsonl").write_text(json.dumps({"current_steps": 1, "loss": 1.5}) + "\n")
        (out / "config.json").write_text("{}")
        (out / "model.safetensors").write_text("")
        if log_file:
            Path(log_file).write_text("ok\n")
        return RunResult(exit_code=0, duration_s=0.1, log_file=str(log_file) if log_file else None)


def test_validator_and_trainer_launch_what_the_memory_table_says(tmp_path: Path) -> None:
    hardware = _hw(2, "0,1")
    memory = estimate_memory(model_spec("Qwen/Qwen2.5-7B-Instruct"), hardware.per_gpu_memory_gb * 1024**3 / 1e9, 2,
                             cpu_ram_gb=512)
    assert "ZeRO-3 (ds_z3_config.json)" in memory.to_markdown()
    scenario = ScenarioInfo(benchmark="demo", base_model="Qwen/Qwen2.5-7B-Instruct", base_model_path="/models/q7",
                            file_path=str(tmp_path), workspace_root=str(tmp_path), hardware=hardware,
                            memory=memory.model_dump(mode="json"), memory_report=memory.to_markdown())
    ws = tmp_path / "loop_0"
    ws.mkdir()
    (ws / "data.json").write_text(json.dumps([ROW] * 8))
    (ws / "train.yaml").write_text(yaml.safe_dump({
        "stage": "sft", "do_train": True, "finetuning_type": "full", "template": "qwen", "cutoff_len": 1024,
        "learning_rate": 1e-5, "num_train_epochs": 1.0, "per_device_train_batch_size": 1}))
    runner = _Recorder()
    settings = load_settings(file_path=str(tmp_path))
    code = CodeResult(workspace=str(ws), files={"train.yaml": str(ws / "train.yaml")})
    report = LlamaFactoryValidator(scenario, settings, runner, catalogue=read_catalogue(FIXTURES)).validate(code, None)
    assert report.passed, report.failure
    assert "deepspeed" in report.injected_keys
    final = yaml.safe_load((ws / "train.yaml").read_text())
    assert final["deepspeed"] == str(ws / DS_Z3) and (ws / DS_Z3).is_file()
    micro = runner.calls[0]
    # each run reads a copy staged in its own read-only inputs, never the workspace's (issue 39, red team B1/B2)
    micro_ds = Path(micro["config"]["deepspeed"])
    assert micro_ds == tmp_path / "validate" / "loop_0" / "micro" / "inputs" / DS_Z3
    assert micro_ds.read_bytes() == (ws / DS_Z3).read_bytes()
    assert micro["env"]["FORCE_TORCHRUN"] == "1" and micro["env"]["NPROC_PER_NODE"] == "2"
    assert micro["gpus"] == "0,1"
    LlamaFactoryTrainer(scenario, settings, runner).train(code, report, None)
    train = runner.calls[-1]
    assert train["cmd"][:2] == ["llamafactory-cli", "train"]
    assert train["config"]["deepspeed"] == str(tmp_path / "train" / "loop_0" / "inputs" / DS_Z3)
    assert (train["env"]["FORCE_TORCHRUN"], train["env"]["NPROC_PER_NODE"], train["gpus"]) == ("1", "2", "0,1")


@pytest.mark.parametrize(("n_gpus", "asked", "expect_ds", "expect_env"), [
    (0, "ds_z3_config.json", None, {}),  # CPU: DeepSpeed removed, no torchrun
    (1, None, None, {}),  # one GPU, model fits: a plain single-process run
    (1, "ds_z3_config.json", DS_Z3, {"FORCE_TORCHRUN": "1", "NPROC_PER_NODE": "1"}),  # a shipped choice is kept
])
def test_single_device_runs(tmp_path: Path, n_gpus: int, asked: str | None, expect_ds: str | None,
                            expect_env: dict) -> None:
    memory = estimate_memory(model_spec("Qwen2.5-0.5B"), 80, 1, device="gpu" if n_gpus else "cpu")
    scenario = ScenarioInfo(benchmark="demo", base_model="m", base_model_path="/models/m", file_path=str(tmp_path),
                            workspace_root=str(tmp_path), hardware=_hw(n_gpus), memory=memory.model_dump(mode="json"))
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "data.json").write_text(json.dumps([ROW] * 4))
    config = {"stage": "sft", "do_train": True, "finetuning_type": "full", "template": "qwen"}
    (ws / "train.yaml").write_text(yaml.safe_dump({**config, **({"deepspeed": asked} if asked else {})}))
    runner = _Recorder()
    report = LlamaFactoryValidator(scenario, load_settings(file_path=str(tmp_path)), runner,
                                   catalogue=read_catalogue(FIXTURES)).validate(CodeResult(workspace=str(ws)), None)
    assert report.passed, report.failure
    call = runner.calls[0]
    assert (Path(call["config"]["deepspeed"]).name if "deepspeed" in call["config"] else None) == expect_ds
    assert {k: v for k, v in call["env"].items() if k in ("FORCE_TORCHRUN", "NPROC_PER_NODE")} == expect_env
    assert call["gpus"] is None


def test_heuristic_recipe_matches_the_launch_plan(tmp_path: Path) -> None:
    from ftagent.planners.heuristic.policy import base_recipe
    from ftagent.tools.llamafactory.memory import method_of_config

    def scenario(memory) -> ScenarioInfo:
        return ScenarioInfo(benchmark="demo", base_model="Qwen/Qwen2.5-7B-Instruct", base_model_path="/m",
                            file_path=str(tmp_path), workspace_root=str(tmp_path), hardware=_hw(2),
                            memory=memory.model_dump(mode="json"))

    two = estimate_memory(model_spec("Qwen2.5-7B"), 80, 2, cpu_ram_gb=512)
    recipe = base_recipe(scenario(two))
    assert recipe["finetuning_type"] == "full"
    final, _ = apply_deepspeed(recipe, memory=two.model_dump(mode="json"), hardware=_hw(2), workspace=tmp_path)
    assert two.get(method_of_config(recipe)).deepspeed == DS_Z3 == Path(final["deepspeed"]).name
    # one 24 GB GPU: full only fits with CPU offload, so the heuristic starts with LoRA (no DeepSpeed)
    one = estimate_memory(model_spec("Qwen2.5-7B"), 24, 1, cpu_ram_gb=512, offload_allowed=True)
    assert one.get("full_gc").offload
    assert base_recipe(scenario(one))["finetuning_type"] == "lora"
