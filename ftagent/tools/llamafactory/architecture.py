"""What a decoder's ``config.json`` says about its memory: parameters, tied embeddings, the loss peak.

The facts the memory estimate (:mod:`ftagent.tools.llamafactory.memory`) and the serving rules
(:mod:`ftagent.tools.opencompass.inference`) read from a model's ``config.json``, each where transformers
(4.57.6, the tool env's) decides it:

* **tied embeddings.** A ``config.json`` without ``tie_word_embeddings`` gets its config class's default
  (``PretrainedConfig.__init__`` keyword, overridden per class): ``Gemma2Config`` ties (True),
  ``LlamaConfig``/``Qwen2Config`` do not. Reading a missing key as False counted gemma-2-9b's 256k x 3584
  output matrix twice (10.16 B parameters for 9.24 B; issue 42 item 4). :data:`TIED_BY_DEFAULT` lists the
  model types whose class defaults to True; ``tests/unit/test_architecture_defaults.py`` checks the
  table against the installed transformers. An unknown model type counts untied: more parameters, never
  fewer.
* **the loss peak** (:func:`logits_bytes_per_token`): the bf16 logits of ``lm_head`` (2·V bytes per
  token) plus what ``ForCausalLMLoss`` (``transformers/loss/loss_utils.py``: ``logits.float()`` at line
  55, then ``cross_entropy`` = ``log_softmax`` + ``nll_loss``) holds at its backward's peak: the saved
  fp32 ``log_softmax`` output, the fp32 gradient ``nll_loss`` hands back and the fp32 gradient
  ``log_softmax``'s backward writes, 4·V each: 14·V bytes per token in all, measured 14.00 on CPU
  (torch 2.13, V = 152,064 and 128,256, T = 1,024 to 4,096; the script is the test
  ``test_loss_peak_is_measured``). gemma-2's logit soft-capping (``Gemma2ForCausalLM.forward``: divide,
  ``tanh``, multiply, each a bf16 copy autograd keeps) adds 2·V: 16·V, measured 16.00.
* **4-bit LoRA keeps the embeddings in 16 bits**: bitsandbytes replaces ``nn.Linear`` modules only
  (``transformers/integrations/bitsandbytes.py`` ``replace_with_bnb_linear``), and not the output
  layer (``get_keys_to_not_convert``: "keep the lm_head in full precision"), so ``embed_tokens`` and an
  untied ``lm_head`` stay 16-bit (:func:`embedding_params`).
"""

from __future__ import annotations

from typing import Any

# model_type -> its transformers config class defaults tie_word_embeddings to True (4.57.6: GemmaConfig,
# Gemma2Config, Gemma3TextConfig, Starcoder2Config, CohereConfig, SmolLM3Config, and PretrainedConfig's
# own default for classes that do not set it, e.g. GPT2Config). Llama, Qwen2/3 (+MoE), Mistral, Mixtral,
# Phi, Phi3, OLMo2, Granite, GLM4, DeepSeek-V3 default to False.
TIED_BY_DEFAULT = frozenset({"gemma", "gemma2", "gemma3_text", "gemma3", "starcoder2", "cohere", "cohere2",
                             "smollm3", "gpt2", "gpt_neox_japanese", "opt", "bloom"})
# model types whose config class sets final_logit_softcapping when config.json does not (Gemma2Config: 30.0)
SOFTCAP_BY_DEFAULT = frozenset({"gemma2"})
LOGITS_BYTES = 14.0  # per vocabulary entry and token at the loss's peak (module docstring, measured)
SOFTCAP_LOGITS_BYTES = 16.0  # the same with final_logit_softcapping (gemma-2)


def ties_embeddings(cfg: dict[str, Any]) -> bool:
    """Whether ``lm_head`` shares ``embed_tokens``: the config's own key, else its class's default."""
    if "tie_word_embeddings" in cfg and cfg["tie_word_embeddings"] is not None:
        return bool(cfg["tie_word_embeddings"])
    return str(cfg.get("model_type") or "") in TIED_BY_DEFAULT


def soft_caps_logits(cfg: dict[str, Any]) -> bool:
    """Whether the model soft-caps its logits (gemma-2's ``final_logit_softcapping``)."""
    if "final_logit_softcapping" in cfg:
        return bool(cfg["final_logit_softcapping"])
    return str(cfg.get("model_type") or "") in SOFTCAP_BY_DEFAULT


def head_dim(cfg: dict[str, Any]) -> int:
    heads = cfg.get("num_attention_heads") or max(cfg["hidden_size"] // 128, 1)
    return int(cfg.get("head_dim") or cfg["hidden_size"] // heads)


def attention_dims(cfg: dict[str, Any]) -> tuple[int, int]:
    """(query width, key/value width): ``heads · head_dim`` and ``kv_heads · head_dim``."""
    heads = cfg.get("num_attention_heads") or max(cfg["hidden_size"] // 128, 1)
    kv_heads = cfg.get("num_key_value_heads") or heads
    return heads * head_dim(cfg), kv_heads * head_dim(cfg)


def embedding_params(cfg: dict[str, Any]) -> int:
    """``embed_tokens`` plus an untied ``lm_head``: the parameters 4-bit LoRA keeps in 16 bits."""
    return int(cfg["vocab_size"]) * int(cfg["hidden_size"]) * (1 if ties_embeddings(cfg) else 2)


def params_from_config(cfg: dict[str, Any]) -> int:
    """Parameter count of a decoder-only transformer from a HF ``config.json`` dict."""
    h, layers = cfg["hidden_size"], cfg["num_hidden_layers"]
    inter = cfg.get("intermediate_size") or 4 * h
    q_dim, kv_dim = attention_dims(cfg)
    attn = h * q_dim * 2 + h * kv_dim * 2
    if cfg.get("attention_bias", cfg.get("model_type") == "qwen2"):  # Qwen2 has q/k/v biases
        attn += q_dim + 2 * kv_dim
    mlp = 3 * h * inter
    per_layer = attn + mlp + 2 * h
    return layers * per_layer + embedding_params(cfg) + h


def logits_bytes_per_token(cfg: dict[str, Any]) -> float:
    """Bytes per vocabulary entry and token at the loss's peak: 14, or 16 with logit soft-capping."""
    return SOFTCAP_LOGITS_BYTES if soft_caps_logits(cfg) else LOGITS_BYTES
