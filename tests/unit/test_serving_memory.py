"""Issue 42 items 3 and 5: what vLLM needs of each GPU, on real config.json files.

* float32 serving (gemma-2 on a GPU without bf16: V100, T4) counts 4 bytes per weight and KV element;
  d350dfe's preflight counted 16-bit weights ("20.3 GB of 28.8 usable [ok]" for gemma-2-9b on a V100,
  which float32 fills with 37 GB).
* vLLM stops at start-up when ONE ``max_model_len`` sequence's KV cache does not fit what the weights and
  the profiled forward pass leave of ``gpu_memory_utilization x memory``
  (vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory); the plan lowers ``max_model_len`` to what
  fits (``fixed``) or refuses below 2,048 tokens. d350dfe checked the weights alone: gemma-2-9b on one L4
  at 8,192 tokens passed, and the baseline would have stopped.
* The evaluator serves with the plan's numbers: the same ``max_model_len`` reaches vLLM's command line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ftagent.tools.launch.plan import launch_plan
from ftagent.tools.launch.profiles import parse_hardware_spec
from ftagent.tools.opencompass import vllm_rules

FIXTURES = Path(__file__).parents[1] / "fixtures" / "model_configs"


def _config(name: str) -> dict:
    return json.loads((FIXTURES / name / "config.json").read_text(encoding="utf-8"))


def _plan(name: str, hardware: str):
    return launch_plan(_config(name), parse_hardware_spec(hardware), name=name.replace("__", "/"))


def _memory(plan):
    return next(v for v in plan.preflight if v.rule == "vllm.memory")


@pytest.mark.parametrize("hardware", ["1xV100", "1xT4"])
def test_float32_serving_counts_four_bytes_a_weight(hardware: str) -> None:
    plan = _plan("google__gemma-2-9b-it", hardware)
    assert plan.vllm_dtype == "float32"
    assert plan.weights_gb == pytest.approx(4 * 9.2417, rel=0.01)  # d350dfe: 20.3 (16-bit, untied count)
    verdict = _memory(plan)
    assert verdict.status == "refused" and "float32 weights" in verdict.message
    assert "check_enough_kv_cache_memory" in verdict.source


def test_float16_model_on_a_t4_is_counted_at_two_bytes() -> None:
    plan = _plan("Qwen__Qwen2.5-3B", "1xT4")
    assert plan.vllm_dtype == "float16" and plan.weights_gb == pytest.approx(2 * plan.params_b, rel=0.01)
    assert _memory(plan).status == "ok"


def test_gemma2_on_one_l4_at_8192_is_refused_before_the_baseline() -> None:
    plan = _plan("google__gemma-2-9b-it", "1xL4")
    assert plan.vllm_dtype == "bfloat16" and plan.max_model_len == 8192
    # one 8,192-token sequence: 42 layers x 2 x 8 KV heads x 256 x 2 bytes = 344 KB a token, 2.82 GB
    assert plan.kv_cache_gb == pytest.approx(42 * 2 * 8 * 256 * 2 * 8192 / 1e9, rel=1e-3)
    assert plan.kv_cache_gb > plan.kv_memory_gb
    assert [v.rule for v in plan.refused] == ["vllm.memory"]
    assert "To serve at least one request" in _memory(plan).message


def test_a_length_that_does_not_fit_is_lowered_and_the_evaluator_serves_that_one(monkeypatch, tmp_path: Path) -> None:
    """Llama-3.1-8B on one A10G: models.yaml's 32,768 tokens need 4.3 GB of KV cache per sequence, more
    than the weights leave; the plan says so (fixed) and the evaluator's model block carries the same
    length, so vLLM gets the plan's --max-model-len."""
    from ftagent.tools.opencompass import model_block

    plan = _plan("meta-llama__Llama-3.1-8B", "1xA10G")
    verdict = _memory(plan)
    assert verdict.status == "fixed" and plan.max_model_len_wanted == 32768
    assert vllm_rules.MIN_SERVE_LEN <= plan.max_model_len < 32768 and plan.max_model_len % vllm_rules.KV_BLOCK_SIZE == 0
    assert plan.kv_cache_gb <= plan.kv_memory_gb
    assert any("max_model_len" in n for n in plan.notes)

    model = tmp_path / "Llama-3.1-8B"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(_config("meta-llama__Llama-3.1-8B")), encoding="utf-8")
    (model / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}), encoding="utf-8")
    hw = parse_hardware_spec("1xA10G")
    monkeypatch.setattr(model_block, "_gpu_facts", lambda n: (hw.memory_gb, hw.compute_capability, hw.gpu_name))
    spec = model_block.model_spec(model, None, "meta-llama/Llama-3.1-8B", 1, "m", serve_adapter=False, backend="vllm-server",
                                  device="cuda")
    assert spec.max_seq_len == plan.max_model_len and spec.tensor_parallel_size == plan.tensor_parallel_size


def test_kv_bytes_follow_vllm_page_layout() -> None:
    qwen = _config("Qwen__Qwen2.5-7B")  # 28 layers, 4 KV heads of 128
    assert vllm_rules.kv_bytes_per_token(qwen, tensor_parallel_size=1, dtype="bfloat16") == 28 * 2 * 4 * 128 * 2
    # TP 8 > 4 KV heads: each GPU keeps one replicated head (get_num_kv_heads: max(1, kv // tp))
    assert vllm_rules.kv_bytes_per_token(qwen, tensor_parallel_size=8, dtype="bfloat16") == 28 * 2 * 1 * 128 * 2
    assert vllm_rules.kv_bytes_per_token(qwen, tensor_parallel_size=1, dtype="float32") == 28 * 2 * 4 * 128 * 4
    # whole 16-token blocks (FullAttentionSpec.max_memory_usage_bytes: cdiv(len, block) pages)
    per = vllm_rules.kv_bytes_per_token(qwen, tensor_parallel_size=1, dtype="bfloat16")
    assert vllm_rules.kv_cache_bytes(qwen, 17, tensor_parallel_size=1, dtype="bfloat16") == 32 * per
    # vLLM's batch defaults (EngineArgs.get_batch_defaults): an H100 profiles more tokens than an A100
    assert vllm_rules.batch_defaults(85.5, "NVIDIA H100 80GB HBM3") == (16384, 1024)
    assert vllm_rules.batch_defaults(85.9, "NVIDIA A100-SXM4-80GB") == (8192, 256)


def test_generation_models_are_not_capped_by_the_tokenizer(tmp_path: Path) -> None:
    """vllm/config/model.py ModelConfig.get_and_verify_max_len reads tokenizer_config.json only for pooling
    models with absolute position embeddings: a generation model's max_model_len ignores the tokenizer's
    model_max_length, and so does the plan (the issue asked for the cap; upstream has none here)."""
    cfg = _config("Qwen__Qwen2.5-7B")
    assert vllm_rules.model_context_len(cfg) == 131072
    assert vllm_rules.model_context_len({**cfg, "model_max_length": 4096}) == 4096  # config.json's own key counts
