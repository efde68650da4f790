"""Slots (issue 41): how FT_PARALLEL_TRIALS splits GPUs or cores, what a slot gives its trial, ftagent plan."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ftagent.core.errors import UserInputError
from ftagent.core.hardware import GPUInfo, HardwareInfo
from ftagent.core.slots import Slot
from ftagent.core.types import ModelInfo, ScenarioInfo
from ftagent.tools.launch.profiles import parse_hardware_spec
from ftagent.tools.launch.slots import plan_cpu_slots, plan_gpu_slots

CONFIGS = Path(__file__).resolve().parents[1] / "fixtures" / "model_configs"


def _config(name: str) -> dict:
    return json.loads((CONFIGS / name / "config.json").read_text())


def test_auto_splits_8_gpus_into_slots_of_what_one_trials_plan_needs() -> None:
    # a 14B on 24 GB GPUs: vLLM needs TP 2 to hold the weights, 4-bit LoRA trains in that -> 4 slots of 2
    sp = plan_gpu_slots("auto", parse_hardware_spec("8xA10G"), _config("Qwen__Qwen2.5-14B"), name="Qwen/Qwen2.5-14B")
    assert (sp.k, sp.gpus_per_slot, sp.method, sp.tensor_parallel_size) == (4, 2, "qlora", 2)
    assert [s.gpus for s in sp.slots] == [["0", "1"], ["2", "3"], ["4", "5"], ["6", "7"]]
    assert len({s.master_port for s in sp.slots}) == 4 and len({s.vllm_port for s in sp.slots}) == 4
    # a 7B LoRA fits one H100: 8 slots; K = 4 gives each trial 2
    seven = _config("Qwen__Qwen2.5-7B")
    assert plan_gpu_slots("auto", parse_hardware_spec("8xH100"), seven, name="Qwen/Qwen2.5-7B").k == 8
    four = plan_gpu_slots("4", parse_hardware_spec("8xH100"), seven, name="Qwen/Qwen2.5-7B")
    assert (four.k, four.gpus_per_slot) == (4, 2)
    three = plan_gpu_slots("3", parse_hardware_spec("8xH100"), seven, name="Qwen/Qwen2.5-7B")
    assert (three.k, three.gpus_per_slot, three.idle) == (3, 2, ["6", "7"])


def test_a_k_the_gpus_cannot_hold_is_refused_naming_what_fits() -> None:
    fourteen = _config("Qwen__Qwen2.5-14B")
    with pytest.raises(UserInputError, match="needs 2 .*at most 4 at once"):
        plan_gpu_slots("8", parse_hardware_spec("8xA10G"), fourteen, name="Qwen/Qwen2.5-14B")
    with pytest.raises(UserInputError, match="has 8 GPU"):
        plan_gpu_slots("16", parse_hardware_spec("8xA10G"), fourteen, name="Qwen/Qwen2.5-14B")
    with pytest.raises(UserInputError, match="whole number"):
        plan_gpu_slots("two", parse_hardware_spec("8xA10G"), fourteen)


def test_cpu_slots_are_shares_of_the_cores_with_their_thread_count() -> None:
    sp = plan_cpu_slots("2", [0, 1], ram_gb=8.0)
    assert [(s.cpus, s.threads) for s in sp.slots] == [([0], 1), ([1], 1)]
    assert [s.label for s in sp.slots] == ["slot 0 (core 0)", "slot 1 (core 1)"]
    assert [(s.cpus, s.threads) for s in plan_cpu_slots("2", list(range(8)), ram_gb=8).slots] == [
        ([0, 1, 2, 3], 4), ([4, 5, 6, 7], 4)]
    assert plan_cpu_slots("auto", [0, 1, 2, 3], ram_gb=8.0, fits=lambda share: share >= 2.5).k == 3  # RAM for 3
    assert plan_cpu_slots("1", [0, 1], ram_gb=8.0).slots[0].cpus == []  # one at a time: nothing pinned
    with pytest.raises(UserInputError, match="at most 2 trial"):
        plan_cpu_slots("3", [0, 1], ram_gb=8.0)


def test_a_slot_pins_its_thread_and_every_process_that_thread_starts() -> None:
    if not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs Linux with 2 cores")
    core = max(os.sched_getaffinity(0))
    seen: dict[str, object] = {}

    def trial() -> None:
        Slot(index=1, cpus=[core], threads=1).bind()
        seen["thread"] = os.sched_getaffinity(0)
        out = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                             capture_output=True, text=True, check=True)
        seen["child"] = out.stdout.strip()

    before = os.sched_getaffinity(0)
    t = threading.Thread(target=trial)
    t.start()
    t.join()
    assert seen == {"thread": {core}, "child": f"[{core}]"}
    assert os.sched_getaffinity(0) == before  # the main thread is not pinned
    assert Slot(index=1, cpus=[core], threads=1, master_port=29501).env() == {"MASTER_PORT": "29501",
                                                                             "OMP_NUM_THREADS": "1"}


def test_a_slots_scenario_names_only_its_gpus_and_its_memory_estimate(tmp_path: Path) -> None:
    from ftagent.core.settings import load_settings
    from ftagent.finetune.slots import slot_scenario
    from ftagent.tools.opencompass.inference import inference_settings

    (tmp_path / "config.json").write_text(json.dumps(_config("Qwen__Qwen2.5-7B")))
    gpus = [GPUInfo(index=i, name="NVIDIA H100", uuid=f"GPU-{i}", memory_total_gb=79.6, memory_used_gb=0.0)
            for i in range(4)]
    scenario = ScenarioInfo(benchmark="b", base_model="Qwen/Qwen2.5-7B", base_model_path=str(tmp_path),
                            model_info=ModelInfo(name="q", path=str(tmp_path)), file_path=".", workspace_root=".",
                            hardware=HardwareInfo(gpus=gpus))
    slot = Slot(index=1, gpus=["GPU-2", "GPU-3"], gpu_indices=[2, 3])
    mine = slot_scenario(scenario, slot, 2, settings=load_settings(), inference=inference_settings("Qwen/Qwen2.5-7B"))
    assert [g.index for g in mine.hardware.gpus] == [2, 3] and mine.hardware.cuda_visible_devices == "GPU-2,GPU-3"
    assert mine.memory["num_gpus"] == 2 and mine.slot == slot
    assert mine.launch_plan["gpu_count"] == 2  # every train.yaml of the trial is checked against the slot's plan
    assert scenario.hardware.gpu_count == 4 and scenario.slot is None  # the session's scenario is untouched


def test_ftagent_plan_hardware_shows_the_slots_and_refuses_a_k_that_does_not_fit(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(_config("Qwen__Qwen2.5-14B")))
    env = {**os.environ, "FT_PARALLEL_TRIALS": "auto"}
    cmd = [sys.executable, "-m", "ftagent", "plan", "--hardware", "8xA10G", "--base-model", str(tmp_path)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert "4 trial(s) at once (FT_PARALLEL_TRIALS=auto)" in out.stdout
    assert "slot 3 (GPU 6,7): MASTER_PORT 29503, vLLM port 18300" in out.stdout
    bad = subprocess.run(cmd + ["--json"], capture_output=True, text=True, env={**env, "FT_PARALLEL_TRIALS": "8"})
    assert bad.returncode == 2 and "at most 4 at once" in json.loads(bad.stdout)["slots"]["requested"]["refused"]
