"""Issue 39 item 8: the candidate's decoding files equal the base's or the validated run's, or the evaluation
sets the key itself, and the verdict says which.

Each cheat below passed the guard at d350dfe (nothing compared generation_config.json or the keys of
tokenizer_config.json other than its added tokens and template); each is now flagged by the ``decoding``
check alone. The honest variations are what LLaMA-Factory 0.9.5 writes (the EOS token list, a pad token
added where the base had none, ``split_special_tokens``, ``padding_side='right'``, a raised
``model_max_length``: measured on a real tiny-qwen2 output, see tests/integration/test_integrity_real_files.py)
and keys the evaluation overrides.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.helpers.model_files import (
    TOKENIZER_CONFIG,
    base_weights,
    candidate,
    finetuned,
    guard_for,
    guarded_base,
    lora_factors,
    write_adapter,
    write_model,
)

LF_GENERATION = {"eos_token_id": [2], "max_new_tokens": 16, "pad_token_id": 0, "transformers_version": "4.57.6"}
# a Qwen2.5 base's EOS is <|endoftext|>; LLaMA-Factory's qwen template replaces it with <|im_end|> (replace_eos)
BASE_TOKENIZER = {**TOKENIZER_CONFIG, "eos_token": "<|endoftext|>"}
LF_TOKENIZER = {**TOKENIZER_CONFIG, "split_special_tokens": False}


@pytest.fixture
def world(tmp_path: Path):
    root, base_w, _, guard = guarded_base(tmp_path, tokenizer_config=BASE_TOKENIZER)
    validated = write_model(root / "debug_output", None, tokenizer_config=LF_TOKENIZER, generation=LF_GENERATION)
    return root, base_w, validated, guard


def _loop(world, *, generation: dict | None = None, tokenizer: dict | None = None) -> Path:
    root, base_w, _, _ = world
    return write_model(root / "cand", finetuned(base_w, 0.2, 1), generation=generation or LF_GENERATION,
                       tokenizer_config=tokenizer or LF_TOKENIZER)


def _verdict(world, folder: Path):
    _, _, validated, guard = world
    return guard.check(candidate(folder, validated_output=str(validated)))


def _flags(world, folder: Path) -> dict[str, str]:
    return {c.name: c.detail for c in _verdict(world, folder).flagged}


# -- cheats ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("edit", [{"num_beams": 4}, {"repetition_penalty": 1.3}, {"sequence_bias": [[[15], 9.0]]},
                                  {"eos_token_id": [2, 15]}, {"min_new_tokens": 3}, {"suppress_tokens": [7]}])
def test_cheat_generation_config_edited(world, edit: dict) -> None:
    flags = _flags(world, _loop(world, generation={**LF_GENERATION, **edit}))
    assert set(flags) == {"decoding"}, flags
    assert f"generation_config.json {next(iter(edit))}=" in flags["decoding"]


@pytest.mark.parametrize("edit", [{"clean_up_tokenization_spaces": True}, {"eos_token": "118"},
                                  {"add_bos_token": True}, {"split_special_tokens": True},
                                  {"auto_map": {"AutoTokenizer": ["tok.MyTokenizer", None]}}])
def test_cheat_tokenizer_settings_edited(world, edit: dict) -> None:
    """``eos_token`` changed in tokenizer_config.json only (special_tokens_map.json untouched)."""
    flags = _flags(world, _loop(world, tokenizer={**LF_TOKENIZER, **edit}))
    assert set(flags) == {"decoding"}, flags
    assert f"tokenizer_config.json {next(iter(edit))}=" in flags["decoding"]


def test_cheat_model_config_stop_token_without_generation_config(world) -> None:
    """No generation_config.json: transformers takes eos_token_id from config.json (from_model_config)."""
    cand = _loop(world)
    (cand / "generation_config.json").unlink()
    config = json.loads((cand / "config.json").read_text())
    (cand / "config.json").write_text(json.dumps({**config, "eos_token_id": 15}))
    flags = _flags(world, cand)
    assert set(flags) == {"decoding"} and "eos_token_id=[15]" in flags["decoding"], flags


def test_cheat_adapter_tokenizer_settings_edited(world) -> None:
    root, _, _, _ = world
    cand = write_adapter(root / "cand", lora_factors(["model.layers.0.self_attn.q_proj"], 4, 1),
                         {"base_model_name_or_path": str(root / "base")})
    write_model(cand, None, tokenizer_config=LF_TOKENIZER)
    (cand / "config.json").unlink()  # an adapter folder: tokenizer files, no model config
    (cand / "tokenizer_config.json").write_text(json.dumps({**LF_TOKENIZER, "clean_up_tokenization_spaces": True}))
    flags = _flags(world, cand)
    assert set(flags) == {"decoding"}, flags


def test_cheat_decoding_file_is_a_link(world) -> None:
    cand = _loop(world)
    other = cand.parent / "elsewhere.json"
    other.write_text(json.dumps({**LF_GENERATION, "num_beams": 8}))
    (cand / "generation_config.json").unlink()
    os.symlink(other, cand / "generation_config.json")
    flags = _flags(world, cand)
    assert set(flags) == {"decoding"} and "unreadable" in flags["decoding"], flags


# -- honest variations -------------------------------------------------------------------------------------
def test_honest_llamafactory_output_equals_the_validated_run(world) -> None:
    verdict = _verdict(world, _loop(world))
    assert verdict.flagged == [], verdict.text()
    decoding = next(c for c in verdict.checks if c.name == "decoding")
    assert decoding.passed and "equal the validated training run's" in decoding.detail, decoding.detail


def test_honest_pad_token_added_where_the_base_had_none(tmp_path: Path) -> None:
    """LLaMA-Factory's Template.fix_special_tokens sets pad = eos when the base has no pad token."""
    no_pad = {k: v for k, v in TOKENIZER_CONFIG.items() if k != "pad_token"}
    base = write_model(tmp_path / "base", base_weights(2), tokenizer_config=no_pad)
    special = {"additional_special_tokens": ["<|im_start|>", "<|im_end|>"], "eos_token": "<|im_end|>"}
    (base / "special_tokens_map.json").write_text(json.dumps(special))
    lf = {**no_pad, "pad_token": "<|im_end|>", "split_special_tokens": False}
    outputs = []
    for name in ("debug_output", "cand"):
        folder = write_model(tmp_path / name, finetuned(base_weights(2), 0.2, 1) if name == "cand" else None,
                             tokenizer_config=lf, generation=LF_GENERATION)
        (folder / "special_tokens_map.json").write_text(json.dumps({**special, "pad_token": "<|im_end|>"}))
        outputs.append(folder)
    guard = guard_for(tmp_path, base)
    verdict = guard.check(candidate(outputs[1], validated_output=str(outputs[0])))
    assert verdict.flagged == [], verdict.text()


def test_honest_keys_the_evaluation_sets_are_not_compared(world) -> None:
    """Without a validated run: only keys OpenCompass sets itself differ from the base's; the verdict names them."""
    root, base_w, _, guard = world
    cand = write_model(root / "cand", finetuned(base_w, 0.2, 1),
                       tokenizer_config={**BASE_TOKENIZER, "model_max_length": 4096, "padding_side": "left"},
                       generation={"eos_token_id": [2], "max_new_tokens": 512, "pad_token_id": 0, "do_sample": True,
                                   "temperature": 0.7, "top_p": 0.9, "top_k": 20})
    verdict = guard.check(candidate(cand))
    assert verdict.flagged == [], verdict.text()
    decoding = next(c for c in verdict.checks if c.name == "decoding")
    assert decoding.detail == ("generation config and tokenizer settings equal the base's; set by the evaluation, "
                               "not compared: max_new_tokens, do_sample, temperature, top_p, top_k, pad_token_id, "
                               "padding_side, model_max_length"), decoding.detail
