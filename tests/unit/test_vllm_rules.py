"""vLLM's refusal rules (issue 30): ftagent/tools/opencompass/vllm_rules.py against upstream's checks."""

from __future__ import annotations

import importlib.util

import pytest

from ftagent.tools.opencompass import vllm_rules as vr

# Qwen2.5-7B-Instruct's attention shape and context (the real file is in tests/fixtures/model_configs)
QWEN7B = {"model_type": "qwen2", "num_attention_heads": 28, "num_key_value_heads": 4,
          "max_position_embeddings": 32768, "rope_scaling": None}
GEMMA2 = {"model_type": "gemma2", "num_attention_heads": 16, "num_key_value_heads": 8,
          "max_position_embeddings": 8192}


def test_loads_by_file_path_without_ftagent():
    """The vLLM stand-in runs in another env and imports the file by path: stdlib only."""
    spec = importlib.util.spec_from_file_location("vllm_rules_copy", vr.__file__)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.refusals(QWEN7B, tensor_parallel_size=4, max_model_len=32768, dtype="bfloat16") == []
    imports = [line for line in open(vr.__file__, encoding="utf-8") if line.startswith(("import ", "from "))]
    assert imports == ["from __future__ import annotations\n", "import os\n"]


def test_tp_must_divide_heads_and_kv_heads():
    assert vr.tp_divides(QWEN7B, 4) and vr.tp_divides(QWEN7B, 2)
    assert not vr.tp_divides(QWEN7B, 8)  # 28 % 8
    assert not vr.tp_divides(QWEN7B, 7)  # 28 % 7 == 0 but 7 % 4 kv heads != 0
    [msg] = vr.refusals(QWEN7B, tensor_parallel_size=8, max_model_len=None, dtype="auto")
    assert "tensor_parallel_size=8" in msg and "verify_with_parallel_config" in msg


def test_choose_tp_is_one_when_weights_fit_and_never_invalid():
    assert vr.choose_tensor_parallel(QWEN7B, 8, weights_gb=15.2, per_gpu_memory_gb=80) == 1
    assert vr.choose_tensor_parallel(QWEN7B, 8, weights_gb=15.2, per_gpu_memory_gb=24) == 2
    # does not fit even on 8: the largest valid size up to 8, never 8 itself
    assert vr.choose_tensor_parallel(QWEN7B, 8, weights_gb=500, per_gpu_memory_gb=24) == 4
    assert vr.choose_tensor_parallel(QWEN7B, 0, weights_gb=15.2, per_gpu_memory_gb=0) == 1


@pytest.mark.parametrize("config, expected", [
    (QWEN7B, 32768),
    (GEMMA2, 8192),
    ({"max_position_embeddings": 32768, "rope_scaling": {"type": "yarn", "factor": 4.0,
                                                          "original_max_position_embeddings": 32768}}, 131072),
    ({"max_position_embeddings": 131072, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, 131072),
    ({"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 2.0}}, 8192),
    ({"text_config": {"num_attention_heads": 8, "max_position_embeddings": 16384}}, 16384),
    ({"num_attention_heads": 8}, 2048),
])
def test_model_context_len(config, expected):
    assert vr.model_context_len(config) == expected


def test_max_model_len_above_context_refused_unless_env(monkeypatch):
    monkeypatch.delenv(vr.ALLOW_LONG_ENV, raising=False)
    [msg] = vr.refusals(GEMMA2, tensor_parallel_size=1, max_model_len=32768, dtype="bfloat16")
    assert "max_model_len=32768" in msg and "_get_and_verify_max_len" in msg
    monkeypatch.setenv(vr.ALLOW_LONG_ENV, "1")
    assert vr.refusals(GEMMA2, tensor_parallel_size=1, max_model_len=32768, dtype="bfloat16") == []


def test_dtype_rules():
    [msg] = vr.refusals(QWEN7B, tensor_parallel_size=1, max_model_len=4096, dtype="bfloat16",
                        compute_capability=(7, 0))
    assert "bfloat16" in msg and "7.0" in msg and "gpu_worker.py" in msg
    assert vr.refusals(QWEN7B, tensor_parallel_size=1, max_model_len=4096, dtype="bfloat16",
                       compute_capability=(8, 0)) == []
    [msg] = vr.refusals(GEMMA2, tensor_parallel_size=1, max_model_len=4096, dtype="float16")
    assert "gemma2" in msg and "float16" in msg
    [msg] = vr.refusals(QWEN7B, tensor_parallel_size=1, max_model_len=4096, dtype="fp8x")
    assert "Unknown dtype" in msg


def test_lora_rules():
    ok = dict(tensor_parallel_size=1, max_model_len=4096, dtype="auto")
    assert vr.refusals(QWEN7B, lora_rank=16, max_lora_rank=16, **ok) == []
    [msg] = vr.refusals(QWEN7B, lora_rank=64, max_lora_rank=32, **ok)
    assert "LoRA rank 64 is greater than max_lora_rank 32" in msg
    [msg] = vr.refusals(QWEN7B, lora_rank=32, **ok)  # vLLM's default max_lora_rank is 16
    assert "max_lora_rank 16" in msg
    [msg] = vr.refusals(QWEN7B, lora_rank=8, max_lora_rank=48, **ok)
    assert "MaxLoRARanks" in msg
    [msg] = vr.refusals(QWEN7B, lora_rank=8, max_lora_rank=8, use_dora=True, **ok)
    assert "DoRA" in msg


def test_real_configs_heads_and_context():
    """The fixtures' real config.json files (tests/fixtures/model_configs/README.md for sources)."""
    import json
    from pathlib import Path

    root = Path(__file__).parents[1] / "fixtures" / "model_configs"

    def cfg(name):
        return json.loads((root / name / "config.json").read_text(encoding="utf-8"))

    q14 = cfg("Qwen__Qwen2.5-14B")  # 40 heads, 8 KV heads
    assert vr.tp_divides(q14, 4) and vr.tp_divides(q14, 8)
    assert not vr.tp_divides(q14, 5)  # 40 % 5 == 0, but 8 KV heads do not split over 5
    assert vr.model_context_len(cfg("meta-llama__Llama-3.1-8B")) == 131072  # llama3 rope: factor not applied
    assert vr.model_context_len(cfg("google__gemma-2-9b-it")) == 8192
    assert vr.model_context_len(cfg("Qwen__Qwen3-8B")) == 40960
    assert vr.attention_heads(cfg("mistralai__Mistral-Nemo-Base-2407")) == 32
