"""Issue 30 finding 7, issue 42 item 4: the logits term of the memory estimate is the cross-entropy peak,
14 bytes per vocabulary entry and token (bf16 logits + the fp32 log_softmax output and the two fp32
gradients of the loss's backward; measured in test_architecture_defaults.py), on top of the layers'."""

from __future__ import annotations

from ftagent.tools.llamafactory.memory import ModelSpec, estimate_memory, spec_from_config

# Qwen2.5-7B-Instruct's config.json (the fields the estimator reads)
QWEN25_7B = {"hidden_size": 3584, "num_hidden_layers": 28, "vocab_size": 152064, "intermediate_size": 18944,
             "num_attention_heads": 28, "num_key_value_heads": 4, "model_type": "qwen2",
             "tie_word_embeddings": False, "max_position_embeddings": 32768}


def _spec() -> ModelSpec:
    return spec_from_config(QWEN25_7B, "Qwen2.5-7B-Instruct")


def test_per_token_counts_fourteen_bytes_per_vocab_entry() -> None:
    h, layers, vocab, inter, q, kv = 3584, 28, 152064, 18944, 3584, 512
    lora = estimate_memory(_spec(), 80, 1).get("lora")
    recomputed = 2 * (4 * h + 2 * q + 2 * kv + 4 * inter) + 2 * 2 * inter  # one layer's tensors + 2 gradients
    expected = 2 * h * layers + recomputed + 14 * vocab  # checkpointed layers + one recomputed + logits
    assert lora.per_token_mb == round(expected / 1e6, 4) == 2.602


def test_lora_on_80gb_does_not_fit_qwen25_7b_whole_32k_context() -> None:
    report = estimate_memory(_spec(), 80, 1)
    lora = report.get("lora")
    assert 20_000 < lora.max_seq_len < 22_000  # ~21k (10·V said 28.6k, 6·V 42.7k: "the whole 32k context")
    assert lora.max_seq_len < report.max_position_embeddings
    assert "whole context" not in report.to_markdown().split("| lora |")[1].splitlines()[0]
