"""The launch plan and its preflight over real model configs (issue 30, "What to build" 2 and 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ftagent.core.errors import UserInputError
from ftagent.tools.launch.plan import launch_plan
from ftagent.tools.launch.preflight import check_plan, preflight
from ftagent.tools.launch.profiles import parse_hardware_spec
from ftagent.tools.opencompass.inference import inference_settings

FIXTURES = Path(__file__).parents[1] / "fixtures" / "model_configs"
MODELS = sorted(p.name for p in FIXTURES.iterdir() if (p / "config.json").is_file())
PROFILES = ("1xA10G", "1xL40S", "2xL40S", "4xA100-40GB", "8xH100", "1xV100", "1xT4")


def _config(name: str) -> dict:
    return json.loads((FIXTURES / name / "config.json").read_text(encoding="utf-8"))


def _plan(name: str, hardware: str, **kw):
    return launch_plan(_config(name), parse_hardware_spec(hardware), name=name.replace("__", "/"), **kw)


def test_at_least_ten_real_configs():
    assert len(MODELS) >= 10


def test_weights_too_big_for_vllm_are_refused() -> None:
    plan = _plan("Qwen__Qwen2.5-32B", "1xL40S")  # 65 GB of 16-bit weights on one 48 GB GPU
    assert {v.rule for v in plan.refused} == {"vllm.memory"}
    assert not _plan("Qwen__Qwen2.5-32B", "2xL40S").refused  # TP 2 halves them


@pytest.mark.parametrize("hardware", PROFILES)
@pytest.mark.parametrize("model", MODELS)
def test_preflight_accepts_every_plan_the_planner_emits(model: str, hardware: str) -> None:
    plan = _plan(model, hardware)
    # the hardware too small for the model (training or serving memory) is a refusal, not a planner bug
    refused = [v for v in plan.preflight if v.status == "refused" and v.rule not in ("ftagent.memory", "vllm.memory")]
    assert refused == [], refused
    assert plan.tensor_parallel_size <= plan.gpu_count and plan.data_parallel_size * plan.tensor_parallel_size <= plan.gpu_count
    if plan.model_context_len:
        assert plan.max_model_len <= plan.model_context_len and plan.max_cutoff_len <= plan.model_context_len
    assert plan.precision == ("fp16" if hardware in ("1xV100", "1xT4") else "bf16")
    if not plan.refused:
        check_plan(plan)  # no exception


def test_qwen25_7b_on_8xh100_done_when() -> None:
    """The issue's done-when: a TP that divides 28, max_model_len within the context, bf16."""
    plan = _plan("Qwen__Qwen2.5-7B", "8xH100")
    assert 28 % plan.tensor_parallel_size == 0 and plan.tensor_parallel_size == 1 and plan.data_parallel_size == 8
    assert plan.max_model_len <= plan.model_context_len and plan.precision == "bf16"
    assert plan.finetuning_type == "full" and plan.deepspeed == "ds_z3_config.json"


def test_tp8_on_28_heads_is_corrected() -> None:
    plan = _plan("Qwen__Qwen2.5-7B", "8xH100", inference={"tensor_parallel_size": 8, "max_seq_len": 32768})
    assert plan.tensor_parallel_size != 8 and 28 % plan.tensor_parallel_size == 0
    verdict = next(v for v in plan.preflight if v.rule == "vllm.tensor_parallel_size")
    assert verdict.status == "fixed" and "8" in verdict.message
    bad = plan.model_copy(update={"tensor_parallel_size": 8, "tensor_parallel_fixed_from": None})
    [refusal] = [v for v in preflight(bad, _config("Qwen__Qwen2.5-7B")) if v.status == "refused"]
    assert refusal.setting == "tensor_parallel_size" and "verify_with_parallel_config" in refusal.source


def test_max_model_len_above_gemma2_context_is_refused_and_planned_within() -> None:
    plan = _plan("google__gemma-2-9b-it", "1xL40S")
    assert plan.max_model_len == 8192  # models.yaml says 32768
    bad = plan.model_copy(update={"max_model_len": 32768})
    refused = [v for v in preflight(bad, _config("google__gemma-2-9b-it")) if v.status == "refused"]
    assert [v.setting for v in refused] == ["max_model_len"]
    with pytest.raises(UserInputError, match="max_model_len"):
        check_plan(bad.model_copy(update={"preflight": refused}))


@pytest.mark.parametrize("hardware", ["1xV100", "1xT4"])
def test_bf16_on_pre_ampere_is_refused(hardware: str) -> None:
    plan = _plan("Qwen__Qwen2.5-3B", hardware)
    assert plan.precision == "fp16" and plan.vllm_dtype == "float16"
    cfg = _config("Qwen__Qwen2.5-3B")
    refused = {v.rule for v in preflight(plan.model_copy(update={"vllm_dtype": "bfloat16"}), cfg)
               if v.status == "refused"}
    assert refused == {"vllm.dtype"}
    refused = {v.rule for v in preflight(plan, cfg, config={"bf16": True}) if v.status == "refused"}
    assert refused == {"lf.bf16"}


def test_gemma2_on_v100_serves_float32() -> None:
    """gemma2 refuses float16 in vLLM and a V100 has no bf16: the one right answer is float32, whose 4-byte
    weights (37 GB) one V100 cannot hold (issue 42 item 3); two serve it at TP 2."""
    one = _plan("google__gemma-2-9b-it", "1xV100")
    assert one.vllm_dtype == "float32" and [v.rule for v in one.refused] == ["vllm.memory"]
    two = _plan("google__gemma-2-9b-it", "2xV100")
    assert two.vllm_dtype == "float32" and two.tensor_parallel_size == 2 and not two.refused


def test_dora_and_lora_rank_are_refused() -> None:
    plan = _plan("Qwen__Qwen2.5-7B", "1xA10G")
    assert plan.finetuning_type == "lora" and not plan.refused
    cfg = _config("Qwen__Qwen2.5-7B")
    [dora] = [v for v in preflight(plan, cfg, use_dora=True) if v.status == "refused"]
    assert "DoRA" in dora.message
    too_big = plan.model_copy(update={"lora_rank": 128, "max_lora_rank": 64})
    [rank] = [v for v in preflight(too_big, cfg) if v.status == "refused"]
    assert "LoRA rank 128 is greater than max_lora_rank 64" in rank.message


def test_deepspeed_without_gpu_and_quantized_full_are_refused() -> None:
    plan = _plan("Qwen__Qwen2.5-7B", "8xH100")
    cfg = _config("Qwen__Qwen2.5-7B")
    cpu = plan.model_copy(update={"gpu_count": 0})
    assert "lf.deepspeed_gpu" in {v.rule for v in preflight(cpu, cfg) if v.status == "refused"}
    bad = preflight(plan, cfg, config={"finetuning_type": "full", "quantization_bit": 4})
    assert "lf.quantization" in {v.rule for v in bad if v.status == "refused"}


@pytest.mark.parametrize("spec", ["8x", "H100", "0xH100", "8xB300", "2x-4GB", ""])
def test_bad_hardware_spec_is_one_clear_error(spec: str) -> None:
    with pytest.raises(UserInputError, match="--hardware"):
        parse_hardware_spec(spec)


def test_memory_spec_assumes_capability() -> None:
    hw = parse_hardware_spec("8x80GB")
    assert hw.memory_gb == 80 and hw.capability_assumed and hw.compute_capability == (8, 0)
    assert parse_hardware_spec("4xa100-40gb").memory_gb == 40960 * 2**20 / 1e9  # NVML's 40,960 MiB


def _detected(n: int, name: str, memory_gib: float, capability) -> object:
    from ftagent.core.hardware import GPUInfo, HardwareInfo

    return HardwareInfo(gpus=[GPUInfo(index=i, name=name, memory_total_gb=memory_gib, memory_used_gb=0.0,
                                      compute_capability=capability) for i in range(n)])


def test_startup_preflight_refuses_before_gpu_work(tmp_path: Path) -> None:
    """The start-up's call (FinetuneScenario.build, GPUs present): a model no method fits is exit 2."""
    from ftagent.core.settings import load_settings
    from ftagent.finetune.hardware_plan import session_plan

    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(_config("Qwen__Qwen2.5-32B")), encoding="utf-8")
    qwen = inference_settings("Qwen/Qwen2.5-32B")  # what the start-up resolved (ResolvedModel.inference)
    settings = load_settings()
    plan = session_plan(model, _detected(8, "NVIDIA H100 80GB HBM3", 79.2, (9, 0)), name="Qwen/Qwen2.5-32B",
                        inference=qwen, cpu_ram_gb=512, settings=settings)
    assert plan is not None and not plan.refused and plan.precision == "bf16"
    check_plan(plan)
    small = session_plan(model, _detected(1, "Tesla T4", 14.6, (7, 5)), name="Qwen/Qwen2.5-32B", inference=qwen,
                         cpu_ram_gb=512, settings=settings)
    with pytest.raises(UserInputError, match="finetuning_type"):
        check_plan(small)
