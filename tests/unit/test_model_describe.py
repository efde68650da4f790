"""describe_model: parameters from safetensors headers and from config dims, think token, README."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

from ftagent.models.describe import config_param_count, describe_model

CONFIG = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 16,
          "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "vocab_size": 50, "max_position_embeddings": 512, "tie_word_embeddings": True, "torch_dtype": "float32"}


def qwen2_shapes(c: dict) -> dict[str, list[int]]:
    """The tensor shapes transformers' Qwen2 writes (written out by hand, independent of the formula)."""
    h, i, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    kv = c["num_key_value_heads"] * h // c["num_attention_heads"]
    shapes = {"model.embed_tokens.weight": [v, h], "model.norm.weight": [h]}
    for n in range(c["num_hidden_layers"]):
        p = f"model.layers.{n}."
        shapes.update({p + "self_attn.q_proj.weight": [h, h], p + "self_attn.q_proj.bias": [h],
                       p + "self_attn.k_proj.weight": [kv, h], p + "self_attn.k_proj.bias": [kv],
                       p + "self_attn.v_proj.weight": [kv, h], p + "self_attn.v_proj.bias": [kv],
                       p + "self_attn.o_proj.weight": [h, h], p + "mlp.gate_proj.weight": [i, h],
                       p + "mlp.up_proj.weight": [i, h], p + "mlp.down_proj.weight": [h, i],
                       p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h]})
    return shapes


def write_safetensors(path: Path, shapes: dict[str, list[int]]) -> None:
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in shapes.items():
        size = 4 * math.prod(shape)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)


def make_model(tmp_path: Path, think: bool, weights: bool) -> Path:
    d = tmp_path / "tiny"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(CONFIG))
    added = [{"id": 49, "content": "<think>", "special": False}] if think else []
    (d / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": {"a": 0}}, "added_tokens": added}))
    (d / "README.md").write_text("---\nlicense: mit\n---\n# Tiny\nA tiny test model.")
    if weights:
        write_safetensors(d / "model.safetensors", qwen2_shapes(CONFIG))
    return d


def test_safetensors_and_config_counts_agree(tmp_path):
    exact = sum(math.prod(s) for s in qwen2_shapes(CONFIG).values())
    assert config_param_count(CONFIG) == exact
    untied = dict(CONFIG, tie_word_embeddings=False)
    assert config_param_count(untied) == exact + 50 * 16
    info = describe_model(make_model(tmp_path, think=True, weights=True))
    assert info.num_parameters == exact and info.parameter_source == "safetensors"
    assert info.architecture == "Qwen2ForCausalLM" and info.max_position_embeddings == 512
    assert info.vocab_size == 50 and info.has_think_token
    assert info.readme_excerpt.startswith("# Tiny") and "license" not in info.readme_excerpt
    md = info.to_markdown()
    assert "Qwen2ForCausalLM" in md and f"{exact:,} (safetensors)" in md and "`<think>` token: yes" in md


def test_config_only_and_no_think(tmp_path):
    info = describe_model(make_model(tmp_path, think=False, weights=False))
    assert info.parameter_source == "config" and info.num_parameters == config_param_count(CONFIG)
    assert not info.has_think_token


def test_empty_folder(tmp_path):
    info = describe_model(tmp_path)
    assert info.num_parameters is None and info.parameter_source == "unknown"
