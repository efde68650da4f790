"""Memory estimator: known cases, sharding semantics and monotonicity."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ftagent.core.hardware import GPUInfo, HardwareInfo
from ftagent.tools.llamafactory.memory import (
    METHODS,
    estimate_for_hardware,
    estimate_memory,
    model_spec,
    params_from_config,
    parse_param_count,
)

QWEN3_8B = {"hidden_size": 4096, "num_hidden_layers": 36, "vocab_size": 151936, "intermediate_size": 12288,
            "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
            "tie_word_embeddings": False, "max_position_embeddings": 40960}
QWEN3_1_7B = {"hidden_size": 2048, "num_hidden_layers": 28, "vocab_size": 151936, "intermediate_size": 6144,
              "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
              "tie_word_embeddings": True, "max_position_embeddings": 40960}


def _folder(tmp_path: Path, name: str, cfg: dict) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def test_param_counts() -> None:
    # Published sizes: Qwen3-8B 8.19B, Qwen3-1.7B 1.72B (tied embeddings).
    assert params_from_config(QWEN3_8B) / 1e9 == pytest.approx(8.19, abs=0.01)
    assert params_from_config(QWEN3_1_7B) / 1e9 == pytest.approx(1.72, abs=0.01)
    tiny = {"model_type": "qwen2", "hidden_size": 128, "num_hidden_layers": 2, "vocab_size": 512, "intermediate_size": 512,
            "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": True}
    assert params_from_config(tiny) == 558_208  # what torch counts for builtin/tiny-qwen2
    assert parse_param_count("Qwen/Qwen3-1.7B") == 1_700_000_000
    assert parse_param_count("meta-llama/Llama-3.1-8B-Instruct") == 8_000_000_000
    assert parse_param_count("HuggingFaceTB/SmolLM2-135M-Instruct") == 135_000_000
    assert parse_param_count("gpt2") is None
    with pytest.raises(ValueError, match="cannot tell the size"):
        model_spec("gpt2")


def test_8b_full_needs_zero3_lora_fits_one_gpu(tmp_path: Path) -> None:
    spec = model_spec(_folder(tmp_path, "Qwen3-8B", QWEN3_8B))
    assert spec.from_config and spec.max_position_embeddings == 40960
    one = estimate_memory(spec, 80, 1)
    # 16 B/param x 8.19B = 131 GB of weights+grads+Adam: cannot fit one 80 GB GPU.
    assert not one.get("full").fits and not one.get("full_gc").fits
    assert one.get("full").static_gb_per_gpu == pytest.approx(131.05, abs=0.1)
    assert one.get("lora").fits and one.get("qlora").fits
    eight = estimate_memory(spec, 80, 8)
    # ZeRO-3 over 8 GPUs: 131/8 = 16.4 GB per GPU plus the 1e9 parameters ZeRO-3 keeps gathered (2 GB,
    # stage3_max_live_parameters), so full fine-tuning fits with room for >8k tokens.
    assert eight.get("full").fits and eight.get("full").sharded
    assert eight.get("full").static_gb_per_gpu == pytest.approx(16.38 + 2.0, abs=0.05)
    assert eight.get("full_gc").max_seq_len > 8192 and eight.get("full").max_seq_len > 4096
    # LoRA does not shard the frozen weights: more GPUs change nothing per GPU.
    assert eight.get("lora") == one.get("lora")
    md = eight.to_markdown()
    assert "8 × 80 GB" in md and "| full (ZeRO-3) | yes |" in md


def test_1_7b_everything_fits_one_80gb(tmp_path: Path) -> None:
    report = estimate_memory(model_spec(_folder(tmp_path, "Qwen3-1.7B", QWEN3_1_7B)), 80, 1)
    assert all(m.fits for m in report.methods)
    full = report.get("full")
    assert full.static_gb_per_gpu == pytest.approx(27.5, abs=0.1) and not full.sharded
    assert report.get("full").max_seq_len < report.get("full_gc").max_seq_len
    # A 12 GB card cannot hold 27.5 GB of full-FT state, but LoRA (3.4 GB frozen bf16) fits.
    small = estimate_memory(model_spec(_folder(tmp_path, "m", QWEN3_1_7B)), 12, 1)
    assert not small.get("full").fits and small.get("lora").fits


def test_monotonicity() -> None:
    spec = model_spec("Qwen3-8B")
    for method in METHODS:
        seqs = [estimate_memory(spec, mem, 1).get(method).max_seq_len for mem in (24, 40, 48, 80, 141)]
        assert seqs == sorted(seqs), method
        by_gpus = [estimate_memory(spec, 80, n).get(method).max_seq_len for n in (1, 2, 4, 8)]
        assert by_gpus == sorted(by_gpus), method
        by_size = [estimate_memory(model_spec(f"m-{b}B"), 80, 8).get(method).max_seq_len
                   for b in (0.5, 1.5, 3, 7, 14, 32, 72)]
        assert by_size == sorted(by_size, reverse=True), method
    report = estimate_memory(spec, 48, 2)
    order = [report.get(m).static_gb_per_gpu for m in ("full", "lora", "qlora")]
    assert order == sorted(order, reverse=True)
    assert report.get("qlora").max_seq_len >= report.get("lora").max_seq_len


def test_uses_per_gpu_memory_not_the_sum(tmp_path: Path) -> None:
    gpus = [GPUInfo(index=i, name="H100", memory_total_gb=79.19, memory_used_gb=0.5) for i in range(8)]
    hw = HardwareInfo(gpus=gpus)
    report = estimate_for_hardware(_folder(tmp_path, "Qwen3-8B", QWEN3_8B), hw, cpu_ram_gb=512)
    assert report.num_gpus == 8 and report.per_gpu_gb == pytest.approx(85.0, abs=0.1)  # 79.19 GiB
    # Had the 8-GPU sum (634 GiB) been used per GPU, 8B LoRA would allow far more than 80 GB worth.
    assert report.get("lora").max_seq_len == estimate_memory(model_spec(tmp_path / "Qwen3-8B"), 85.03, 1).get(
        "lora").max_seq_len
    cpu = estimate_for_hardware("SmolLM2-135M", HardwareInfo(), cpu_ram_gb=64)
    assert cpu.device == "cpu" and cpu.num_gpus == 1


def test_7b_on_2x80gb_plans_zero3_and_the_table_names_it() -> None:
    from ftagent.tools.llamafactory.memory import DS_Z3, planned_deepspeed

    report = estimate_memory(model_spec("Qwen/Qwen2.5-7B-Instruct"), 80, 2, cpu_ram_gb=512)
    for method in ("full", "full_gc"):
        est = report.get(method)
        assert est.fits and est.sharded and est.deepspeed == DS_Z3 and not est.offload
    assert report.get("lora").deepspeed is None and report.get("qlora").deepspeed is None
    md = report.to_markdown()
    assert "| full (ZeRO-3) | yes | ZeRO-3 (ds_z3_config.json) |" in md
    assert "| full + disable_gradient_checkpointing (ZeRO-3) | yes |" in md and "| full_gc" not in md
    assert "| lora | yes | DDP × 2 |" in md
    # the plan survives the JSON round trip of ScenarioInfo.memory
    as_json = report.model_dump(mode="json")
    assert planned_deepspeed(as_json, {"finetuning_type": "full"}) == DS_Z3
    assert planned_deepspeed(as_json, {"finetuning_type": "full", "disable_gradient_checkpointing": True}) == DS_Z3
    assert planned_deepspeed(as_json, {"finetuning_type": "lora"}) is None
    assert planned_deepspeed(None, {"finetuning_type": "full"}) is None


def test_offload_only_when_it_is_needed_and_the_host_can_hold_it() -> None:
    from ftagent.tools.llamafactory.memory import DS_Z3_OFFLOAD, method_of_config

    spec = model_spec("Qwen2.5-7B")
    # 7B full on one 24 GB GPU: 112 GB of state cannot fit; with 256 GB of host RAM (> 18 B/param) ZeRO-3
    # offload keeps the partitions on the host and only the gathered parameters (at most 1e9, 2 GB) on the GPU.
    big_host = estimate_memory(spec, 24, 1, cpu_ram_gb=256, offload_allowed=True).get("full_gc")
    assert big_host.fits and big_host.offload and big_host.deepspeed == DS_Z3_OFFLOAD
    assert big_host.static_gb_per_gpu == pytest.approx(2.0, abs=0.1)
    small_host = estimate_memory(spec, 24, 1, cpu_ram_gb=64, offload_allowed=True).get("full_gc")  # 126 GB needed
    assert not small_host.fits and small_host.deepspeed is None
    assert not estimate_memory(spec, 24, 1, offload_allowed=True).get("full_gc").fits  # host RAM unknown: no offload
    # issue 42 item 1: RAM alone is not a reason; offload is not allowed unless asked or CPU Adam is built
    assert not estimate_memory(spec, 24, 1, cpu_ram_gb=256).get("full_gc").fits
    # a model that fits one GPU needs no DeepSpeed at all; CPU runs never get one
    small = estimate_memory(model_spec("Qwen2.5-0.5B"), 80, 1, cpu_ram_gb=256, offload_allowed=True)
    assert all(m.deepspeed is None for m in small.methods)
    assert "| full | yes | 1 GPU |" in small.to_markdown()
    cpu = estimate_memory(spec, 24, 1, device="cpu", cpu_ram_gb=1024, offload_allowed=True)
    assert all(m.deepspeed is None for m in cpu.methods)
    assert method_of_config({"finetuning_type": "full"}) == "full_gc"
    assert method_of_config({"finetuning_type": "full", "disable_gradient_checkpointing": "true"}) == "full"
    assert method_of_config({"finetuning_type": "lora", "quantization_bit": 4}) == "qlora"
    assert method_of_config({"finetuning_type": "freeze"}) == "lora"


def test_tiny_model_table_names_llamafactory_configs_and_distinct_sizes() -> None:
    from ftagent.tools.llamafactory.memory import ModelSpec

    spec = ModelSpec(name="tiny-qwen2", params=558_208, hidden_size=128, num_layers=2, vocab_size=512,
                     intermediate_size=344, num_heads=4, num_kv_heads=2, max_position_embeddings=512, from_config=True)
    md = estimate_memory(spec, 24.0, 1, device="cpu").to_markdown()
    assert "| full + disable_gradient_checkpointing | yes | CPU | 8.9 MB |" in md
    assert "| lora | yes | CPU | " in md and "qlora" not in md and "quantization_bit: 4 |" not in md
    assert "10.0 MB" not in md and "0.0 |" not in md
    gpu = estimate_memory(spec, 80.0, 1).to_markdown()
    assert "| lora + quantization_bit: 4 | yes |" in gpu
