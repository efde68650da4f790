"""Issue 42 item 1: ``ftagent plan --hardware`` and the session's own plan agree on every cell of the
docs/gpu.md matrix (every dense fixture config x every profile x both RAM sizes x FT_CPU_OFFLOAD off/on).

The CLI side is :func:`ftagent.finetune.plan.plan_hardware` (what ``ftagent plan --hardware SPEC --ram GB``
prints), from the GPU's name; the session side is :func:`ftagent.finetune.hardware_plan.session_plan`
(what ``FinetuneScenario.build`` plans, checks and hands the validator), from a :class:`HardwareInfo` as
NVML reports those GPUs (names, NVML's byte count, compute capability) and the host's RAM. On d350dfe they
differed in method or DeepSpeed config for 12 of the issue's 42 plans: the CLI passed no RAM and the
vendor's "80 GB", the session its RAM (so ZeRO-3 CPU offload with torch's CPU AdamW) and NVML's 85.5 GB.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ftagent.core.hardware import GPUInfo, HardwareInfo
from ftagent.core.settings import load_settings
from ftagent.finetune.hardware_plan import session_plan
from ftagent.finetune.plan import plan_hardware
from ftagent.tools.launch.profiles import MIB, SPEC_RE, _key, gpu_table
from ftagent.tools.opencompass.inference import inference_settings
from tests.helpers import launch_matrix

# what NVML calls each profile's GPU (nvmlDeviceGetName)
NVML_NAMES = {"A10G": "NVIDIA A10G", "L40S": "NVIDIA L40S", "A100-40GB": "NVIDIA A100-SXM4-40GB",
              "H100": "NVIDIA H100 80GB HBM3", "V100": "Tesla V100-PCIE-32GB", "T4": "Tesla T4"}
# the plan as a run uses it: everything but the words that name the hardware the way it was given
NAMING = {"hardware", "notes"}


def detected(spec: str) -> HardwareInfo:
    """``spec``'s GPUs as NVML reports them (count, name, total bytes, compute capability)."""
    match = SPEC_RE.match(spec)
    assert match
    count, gpu = int(match.group(1)), match.group(2)
    entry = gpu_table()[_key(gpu)]
    total = int(entry["nvml_mib"]) * MIB
    return HardwareInfo(gpus=[GPUInfo(index=i, name=NVML_NAMES[gpu], memory_total_gb=round(total / 2**30, 2),
                                      memory_used_gb=0.0, memory_total_bytes=total,
                                      compute_capability=tuple(entry["compute_capability"]))
                              for i in range(count)])


@pytest.fixture
def models_home(tmp_path: Path, monkeypatch) -> Path:
    """FT_FILE_PATH/models/<org>/<name>/config.json for every matrix model: ``--base-model org/name`` reads it
    there (no Hub), and the session's model folder is the same."""
    files = tmp_path / "files"
    for name, cfg in launch_matrix.models():
        folder = files / "models" / name
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    monkeypatch.setenv("FT_FILE_PATH", str(files))
    monkeypatch.chdir(tmp_path)
    return files / "models"


def _comparable(plan) -> dict:
    out = plan.model_dump(mode="json", exclude=NAMING)
    for verdict in out["preflight"]:  # a message may name the hardware as it was given ("1xT4", "1x Tesla T4")
        verdict["message"] = verdict["message"].replace(plan.hardware.spec, "<hardware>")
    return out


@pytest.mark.parametrize("asked", [False, True])
@pytest.mark.parametrize("ram_gb", launch_matrix.RAM_SIZES)
def test_plan_hardware_and_the_session_agree_on_every_cell(models_home: Path, monkeypatch, ram_gb: float,
                                                           asked: bool) -> None:
    monkeypatch.setenv("FT_CPU_OFFLOAD", "true" if asked else "false")
    settings = load_settings()
    differ = []
    for name, _cfg in launch_matrix.models():
        for spec in launch_matrix.PROFILES:
            printed = plan_hardware(name, spec, ram_gb=ram_gb, file_settings={})
            run = session_plan(models_home / name, detected(spec), name=name, inference=inference_settings(name),
                               cpu_ram_gb=ram_gb, settings=settings)
            assert run is not None
            if _comparable(printed) != _comparable(run):
                a, b = _comparable(printed), _comparable(run)
                differ.append((name, spec, {k: (a[k], b[k]) for k in a if a[k] != b[k]}))
            # and the docs/gpu.md cell is this plan
            assert launch_matrix.cell(run) == launch_matrix.cell(
                launch_matrix.plan_of(name, _cfg, spec, ram_gb=ram_gb, asked=asked))
    assert not differ, differ[:3]


def test_without_ram_the_plan_says_offload_is_not_considered(models_home: Path, monkeypatch) -> None:
    monkeypatch.setenv("FT_CPU_OFFLOAD", "true")
    plan = plan_hardware("Qwen/Qwen2.5-7B", "1xA10G", file_settings={})
    assert "RAM unknown: offload not considered (--ram GB)" in plan.notes
    assert plan.deepspeed is None and plan.method != "full_gc"
    offered = plan_hardware("Qwen/Qwen2.5-7B", "1xA10G", ram_gb=1024, file_settings={})
    assert offered.method == "full_gc" and offered.deepspeed == "ds_z3_offload_config.json"


def test_offload_nobody_asked_for_is_never_planned(models_home: Path, monkeypatch) -> None:
    """RAM enough for offload, FT_CPU_OFFLOAD off, DeepSpeed's CPU Adam not built: the memory table says full
    fine-tuning does not fit one A10G, and the plan is LoRA (d350dfe's session planned full fine-tuning
    through ZeRO-3 offload run by torch's CPU AdamW whenever the host had 18 bytes a parameter)."""
    monkeypatch.setenv("FT_CPU_OFFLOAD", "false")
    plan = plan_hardware("Qwen/Qwen2.5-7B", "1xA10G", ram_gb=1024, file_settings={})
    full = plan.memory.get("full_gc")
    assert not full.fits and not full.offload and plan.method in ("lora", "qlora")
    assert any("CPU offload not considered" in n for n in plan.notes)
    assert "| full | no |" in plan.memory.to_markdown()
