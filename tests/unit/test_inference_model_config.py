"""Issue 30 findings 2 and 3: ``tensor_parallel_size: auto`` and ``max_seq_len`` (vLLM's max_model_len)
follow the model's own config.json. Before: TP = the largest power of two <= the GPU count (8 for
Qwen2.5-7B's 28 heads, which vLLM refuses) and 32768 for every model (gemma-2 has 8192)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ftagent.tools.opencompass import model_block
from ftagent.tools.opencompass import vllm_rules as vr
from ftagent.tools.opencompass.inference import inference_config, read_model_config

FIXTURES = Path(__file__).parents[1] / "fixtures" / "model_configs"


def _config(name: str) -> dict:
    return json.loads((FIXTURES / name / "config.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
@pytest.mark.parametrize("memory_gb", [24.0, 80.0])
def test_tp_auto_divides_the_heads(gpus: int, memory_gb: float) -> None:
    cfg = _config("Qwen__Qwen2.5-7B")  # 28 heads, 4 KV heads (README.md there)
    inf = inference_config("Qwen/Qwen2.5-7B", gpus, model_config=cfg, per_gpu_memory_gb=memory_gb)
    tp = inf["tensor_parallel_size"]
    assert 28 % tp == 0 and tp <= gpus
    assert vr.refusals(cfg, tensor_parallel_size=tp, max_model_len=inf["max_seq_len"], dtype="bfloat16") == []
    assert tp == (1 if memory_gb == 80 or gpus == 1 else 2)  # 15 GB of weights: one 80 GB GPU is enough


def test_max_seq_len_is_capped_at_the_model_context() -> None:
    gemma = _config("google__gemma-2-9b-it")
    assert inference_config("google/gemma-2-9b-it", 1, model_config=gemma)["max_seq_len"] == 8192
    qwen3 = _config("Qwen__Qwen3-8B")
    assert inference_config("Qwen/Qwen3-8B", 1, model_config=qwen3)["max_seq_len"] == 40960


def test_model_spec_reads_the_served_model_config(tmp_path: Path, monkeypatch) -> None:
    """The evaluation's model block (what vLLM is started with) takes TP and length from config.json."""
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(_config("google__gemma-2-9b-it")), encoding="utf-8")
    (model / "chat_template.jinja").write_text("{{ messages }}")
    monkeypatch.setattr(model_block, "_gpu_facts", lambda n: (24.0, (8, 6), "NVIDIA A10G"))
    spec = model_block.model_spec(model, None, "google/gemma-2-9b-it", 8, "ft-x", serve_adapter=False,
                                  backend="vllm", device="cuda")
    assert spec.max_seq_len == 8192
    assert 16 % spec.tensor_parallel_size == 0 and spec.tensor_parallel_size == 2  # 18.5 GB > 60 % of 24
    assert read_model_config(tmp_path / "absent") == {}


def test_bf16_dtype_becomes_what_a_pre_ampere_gpu_serves(tmp_path: Path, monkeypatch) -> None:
    """vLLM refuses dtype bfloat16 below compute capability 8.0 (models.yaml says bfloat16)."""
    model = tmp_path / "m"
    model.mkdir()
    (model / "chat_template.jinja").write_text("{{ messages }}")
    for name, capability, dtype in [("Qwen__Qwen2.5-3B", (7, 0), "float16"), ("google__gemma-2-9b-it", (7, 5), "float32"),
                                    ("Qwen__Qwen2.5-3B", (9, 0), "bfloat16")]:
        (model / "config.json").write_text(json.dumps(_config(name)), encoding="utf-8")
        monkeypatch.setattr(model_block, "_gpu_facts", lambda n, c=capability: (32.0, c, "Tesla V100"))
        spec = model_block.model_spec(model, None, name.replace("__", "/"), 1, "ft-x", serve_adapter=False,
                                      backend="vllm", device="cuda")
        assert spec.dtype == dtype
        assert vr.refusals(_config(name), tensor_parallel_size=1, max_model_len=spec.max_seq_len, dtype=spec.dtype,
                           compute_capability=capability) == []
