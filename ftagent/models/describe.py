"""Describe a local base model from its files (no torch, no download).

``describe_model(model_dir)`` reads ``config.json``, the safetensors headers, ``tokenizer.json`` /
``tokenizer_config.json`` and the README, and returns a :class:`ModelInfo`. The parameter count is
exact when safetensors files are present (sum of tensor sizes in their headers), otherwise computed
from the config dimensions of a decoder-only transformer (gated MLP, optional QKV bias).
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

from ftagent.core.types import ModelInfo

README_NAMES = ("README.md", "readme.md", "model_card.md")
README_CHARS = 1000
THINK = "<think>"


def _config_for(cfg: dict) -> dict:
    """Text config of multimodal wrappers (``text_config``) or the config itself."""
    return cfg.get("text_config") or cfg


def safetensors_param_count(model_dir: Path) -> int | None:
    """Sum of tensor element counts over ``*.safetensors`` headers, or None when there are none."""
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for path in files:
        with path.open("rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(size))
        total += sum(math.prod(t["shape"]) for k, t in header.items() if k != "__metadata__")
    return total


def config_param_count(cfg: dict) -> int | None:
    """Parameters of a decoder-only transformer (LLaMA/Qwen/Mistral family) from its config."""
    c = _config_for(cfg)
    try:
        h, layers, vocab = int(c["hidden_size"]), int(c["num_hidden_layers"]), int(c["vocab_size"])
        inter = int(c.get("intermediate_size") or 4 * h)
    except (KeyError, TypeError, ValueError):
        return None
    heads = int(c.get("num_attention_heads") or 1)
    kv_heads = int(c.get("num_key_value_heads") or heads)
    head_dim = int(c.get("head_dim") or h // heads)
    q_dim, kv_dim = heads * head_dim, kv_heads * head_dim
    attn = h * q_dim + 2 * h * kv_dim + q_dim * h
    if c.get("model_type") == "qwen2" or c.get("attention_bias"):
        attn += q_dim + 2 * kv_dim
    mlp = 3 * h * inter
    per_layer = attn + mlp + 2 * h
    embed = vocab * h
    head = 0 if c.get("tie_word_embeddings", False) else vocab * h
    return embed + layers * per_layer + h + head


def tokenizer_has_think(model_dir: Path) -> bool:
    """True when ``<think>`` is in the tokenizer's vocabulary or added tokens."""
    tok = Path(model_dir) / "tokenizer.json"
    if tok.is_file():
        data = json.loads(tok.read_text(encoding="utf-8"))
        vocab = (data.get("model") or {}).get("vocab") or {}
        in_vocab = THINK in vocab if isinstance(vocab, dict) else any(
            isinstance(v, list) and v and v[0] == THINK for v in vocab)
        if in_vocab or any(t.get("content") == THINK for t in data.get("added_tokens") or []):
            return True
    cfg = Path(model_dir) / "tokenizer_config.json"
    if cfg.is_file():
        decoder = json.loads(cfg.read_text(encoding="utf-8")).get("added_tokens_decoder") or {}
        return any(v.get("content") == THINK for v in decoder.values())
    return False


def _readme(model_dir: Path) -> str:
    for name in README_NAMES:
        path = Path(model_dir) / name
        if path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace")
            if text.startswith("---"):  # drop the YAML front matter of HF cards
                end = text.find("\n---", 3)
                text = text[end + 4:] if end > 0 else text
            return text.strip()[:README_CHARS]
    return ""


def describe_model(model_dir: Path, name: str | None = None) -> ModelInfo:
    """Describe the model in ``model_dir`` (missing files leave fields empty; nothing raises for them)."""
    model_dir = Path(model_dir)
    cfg_path = model_dir / "config.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf-8")) if cfg_path.is_file() else {}
    c = _config_for(cfg)
    exact = safetensors_param_count(model_dir)
    estimate = None if exact is not None else config_param_count(cfg)
    return ModelInfo(
        name=name or model_dir.name,
        path=str(model_dir),
        architecture=",".join(cfg.get("architectures") or []),
        model_type=str(cfg.get("model_type") or ""),
        num_parameters=exact if exact is not None else estimate,
        parameter_source="safetensors" if exact is not None else "config" if estimate else "unknown",
        max_position_embeddings=c.get("max_position_embeddings"),
        vocab_size=c.get("vocab_size"),
        hidden_size=c.get("hidden_size"),
        num_hidden_layers=c.get("num_hidden_layers"),
        torch_dtype=str(c.get("torch_dtype") or c.get("dtype") or "") or None,
        has_think_token=tokenizer_has_think(model_dir),
        readme_excerpt=_readme(model_dir),
    )
