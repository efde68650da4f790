"""Issue 30 finding 7: the logits term of the memory estimate is the cross-entropy peak, 10 bytes per
vocabulary entry and token (bf16 logits + fp32 upcast + fp32 log_softmax; memory.py's docstring)."""

from __future__ import annotations

from ftagent.tools.llamafactory.memory import ModelSpec, estimate_memory, params_from_config

# Qwen2.5-7B-Instruct's config.json (the fields the estimator reads)
QWEN25_7B = {"hidden_size": 3584, "num_hidden_layers": 28, "vocab_size": 152064, "intermediate_size": 18944,
             "num_attention_heads": 28, "num_key_value_heads": 4, "model_type": "qwen2",
             "tie_word_embeddings": False, "max_position_embeddings": 32768}


def _spec() -> ModelSpec:
    c = QWEN25_7B
    return ModelSpec(name="Qwen2.5-7B-Instruct", params=params_from_config(c), hidden_size=c["hidden_size"],
                     num_layers=c["num_hidden_layers"], vocab_size=c["vocab_size"],
                     intermediate_size=c["intermediate_size"], num_heads=c["num_attention_heads"],
                     num_kv_heads=c["num_key_value_heads"], max_position_embeddings=32768, from_config=True)


def test_per_token_counts_ten_bytes_per_vocab_entry() -> None:
    h, layers, vocab = 3584, 28, 152064
    lora = estimate_memory(_spec(), 80, 1).get("lora")
    expected = 2 * h * layers + 34 * h + 10 * vocab  # checkpointed layers + one recomputed + logits
    assert lora.per_token_mb == round(expected / 1e6, 4) == 1.8432


def test_lora_on_80gb_does_not_fit_qwen25_7b_whole_32k_context() -> None:
    report = estimate_memory(_spec(), 80, 1)
    lora = report.get("lora")
    assert 27_000 < lora.max_seq_len < 30_000  # ~28.6k (6·V said 42.7k: "the whole 32k context")
    assert lora.max_seq_len < report.max_position_embeddings
    assert "whole context" not in report.to_markdown().split("| lora |")[1].splitlines()[0]
