"""Built-in model specs: the 50M GPU-check model's sizes, its marker, name validation."""

from __future__ import annotations

from ftagent.models import tiny_qwen2_script
from ftagent.models.base_model import check_model_name
from ftagent.models.builtin import BUILTIN_MODELS, BuildMarker, _expected_marker
from ftagent.tools.llamafactory.memory import params_from_config


def test_qwen2_50m_sizes_and_marker() -> None:
    spec = BUILTIN_MODELS["qwen2-50m"]
    args = tiny_qwen2_script.parse_args(["/out", *spec.args])
    cfg = {"model_type": "qwen2", "hidden_size": args.hidden, "num_hidden_layers": args.layers,
           "vocab_size": args.vocab, "intermediate_size": args.inter, "num_attention_heads": args.heads,
           "num_key_value_heads": args.kv_heads, "tie_word_embeddings": True}
    assert params_from_config(cfg) == 52_191_744  # what torch counted for a build of it
    marker = _expected_marker(spec, 2)
    assert marker.args == spec.args
    # the tiny model's marker (no args) is unchanged: an existing build stays valid
    tiny = _expected_marker(BUILTIN_MODELS["tiny-qwen2"], 2)
    assert BuildMarker.model_validate_json(tiny.model_dump_json(exclude={"args"})) == tiny
    check_model_name("builtin/qwen2-50m")
