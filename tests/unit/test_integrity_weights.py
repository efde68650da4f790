"""Issue 39 item 3: every tensor of the candidate is fingerprinted and compared with the base's, streamed.

Each cheat below passed the guard at d350dfe (it sampled 3 tensors: the embeddings and the first and last
layer's q_proj, read from every ``*.safetensors`` of the folder, and skipped adapters); each is now flagged by
the ``weights`` check, and only by it. The honest variations (an aggressive full fine-tune, a weak model,
BF16, a sharded checkpoint, LoRA adapters of several kinds) are not flagged. The models have
builtin/tiny-qwen2's 26 tensors (tests/helpers/model_files.py); the real files are used by
tests/integration/test_integrity_real_files.py.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from ftagent.integrity import safetensors_io
from ftagent.integrity.weight_prints import fingerprint
from ftagent.integrity.weights import compare_full, weight_check
from tests.helpers.model_files import (
    DEMO_RUN,
    GuardedBase,
    base_weights,
    candidate,
    finetuned,
    guarded_base,
    lora_factors,
    trained,
    write_adapter,
    write_model,
    write_safetensors,
)

SAMPLED = ("model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
           "model.layers.1.self_attn.q_proj.weight")  # what d350dfe's check read
ATTN = [f"model.layers.{i}.self_attn.{p}_proj" for i in (0, 1) for p in "qkvo"]


@pytest.fixture
def world(tmp_path: Path) -> GuardedBase:
    return guarded_base(tmp_path)


def _flags(guard, folder: Path) -> dict[str, str]:
    return {c.name: c.detail for c in guard.check(candidate(folder)).flagged}


# -- cheats ----------------------------------------------------------------------------------------------
def test_cheat_every_tensor_replaced_but_the_three_sampled_ones(world) -> None:
    """The red team's model: 23 of 26 tensors from another checkpoint, the three sampled ones fine-tuned."""
    root, base_w, _, guard = world
    other = base_weights(7)
    tuned = finetuned(base_w, 0.05, 1)
    cand = write_model(root / "cand", {k: tuned[k] if k in SAMPLED else other[k] for k in base_w})
    flags = _flags(guard, cand)
    assert set(flags) == {"weights"}, flags
    assert "12 of 20 tensors below cosine 0.1" in flags["weights"], flags  # the 12 other 2-D tensors


def test_cheat_base_weights_planted_in_a_second_file(world) -> None:
    """Another checkpoint in model.safetensors, the base's weights in model_zz.safetensors (read last by a
    glob, and by vLLM, which loads every *.safetensors of a folder without an index)."""
    root, base_w, base, guard = world
    cand = write_model(root / "cand", base_weights(7))
    shutil.copy(base / "model.safetensors", cand / "model_zz.safetensors")
    flags = _flags(guard, cand)
    assert set(flags) == {"weights"}, flags
    assert "model_zz.safetensors is not one of the model's weight files" in flags["weights"]


def test_cheat_sharded_checkpoint_with_a_swapped_shard(world) -> None:
    """The index's first shard holds the sampled tensors (fine-tuned), the second another checkpoint's."""
    root, base_w, _, guard = world
    other, tuned = base_weights(7), finetuned(base_w, 0.05, 1)
    cand = write_model(root / "cand", None)
    first = {k: tuned[k] for k in base_w if k in SAMPLED or "layers.0.mlp" in k}
    second = {k: other[k] for k in base_w if k not in first}
    write_safetensors(cand / "model-00001-of-00002.safetensors", first)
    write_safetensors(cand / "model-00002-of-00002.safetensors", second)
    weight_map = {k: "model-00001-of-00002.safetensors" for k in first} | \
        {k: "model-00002-of-00002.safetensors" for k in second}
    (cand / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    flags = _flags(guard, cand)
    assert set(flags) == {"weights"} and "below cosine" in flags["weights"], flags


def test_cheat_adapter_that_swaps_in_another_model(world) -> None:
    """A full-rank "LoRA" whose B @ A is another checkpoint minus the base, on every attention projection."""
    root, base_w, base, guard = world
    other = base_weights(7)
    factors = {}
    for module in ATTN:
        w = f"{module}.weight"
        rows, cols = base_w[w].shape
        factors[f"base_model.model.{module}.lora_A.weight"] = np.eye(cols, dtype=np.float32)
        factors[f"base_model.model.{module}.lora_B.weight"] = other[w] - base_w[w]
    cand = write_adapter(root / "cand", factors, {"r": 128, "lora_alpha": 128, "base_model_name_or_path": str(base)})
    write_model(cand, None)
    (cand / "config.json").unlink()
    flags = _flags(guard, cand)
    assert set(flags) == {"weights"}, flags
    assert flags["weights"].startswith("LoRA adapter (base + adapter): 8 of 8 tensors below cosine 0.1"), flags
    # and A = I is beyond where peft starts lora_A (1/sqrt(128)) plus what 300 steps at 1e-3 add (0.77)
    assert "8 of 16 tensors moved farther from where training started" in flags["weights"], flags


@pytest.mark.parametrize("change", ["missing", "extra", "reshaped"])
def test_cheat_tensor_set_differs_from_the_base(world, change: str) -> None:
    root, base_w, _, guard = world
    tensors = finetuned(base_w, 0.05, 1)
    if change == "missing":
        del tensors["model.layers.1.mlp.down_proj.weight"]
    elif change == "extra":
        tensors["model.layers.2.mlp.down_proj.weight"] = tensors["model.layers.1.mlp.down_proj.weight"]
    else:
        tensors["model.layers.1.mlp.down_proj.weight"] = tensors["model.layers.1.mlp.down_proj.weight"].reshape(512, 128)
    flags = _flags(guard, write_model(root / "cand", tensors))
    assert set(flags) == {"weights"}, flags
    assert {"missing": "1 base tensor(s) missing", "extra": "1 tensor(s) the base does not have",
            "reshaped": "has shape [512, 128], the base's [128, 512]"}[change] in flags["weights"]


@pytest.mark.timeout(60)
def test_cheat_weights_file_that_is_a_fifo_does_not_hang_the_guard(world) -> None:
    root, _, _, guard = world
    cand = write_model(root / "cand", None)
    os.mkfifo(cand / "model.safetensors")
    flags = _flags(guard, cand)
    assert "model.safetensors is a FIFO: refused" in flags["weights"], flags


def test_cheat_base_weights_replaced_after_the_start(world) -> None:
    """The base's file rewritten with the candidate's checkpoint after the references were recorded."""
    root, _, base, guard = world
    other = base_weights(7)
    write_safetensors(base / "model.safetensors", other)
    flags = _flags(guard, write_model(root / "cand", other))
    assert set(flags) == {"weights"} and "base model's weight files changed" in flags["weights"], flags


# -- honest variations -------------------------------------------------------------------------------------
@pytest.mark.parametrize("relative", [0.0, 0.01, 0.5, 2.0])
def test_honest_full_finetunes_and_a_weak_model_pass(world, relative: float) -> None:
    """0.0 is the base itself (a fine-tune that learned nothing); 2.0 moves every tensor twice its scale
    (cosine ~0.45: the CPU demo's embeddings)."""
    root, base_w, _, guard = world
    verdict = guard.check(candidate(write_model(root / "cand", finetuned(base_w, relative, 3))))
    assert verdict.flagged == [], verdict.text()
    weights = next(c for c in verdict.checks if c.name == "weights")
    assert "20 tensors compared" in weights.detail and "6 all-zero in the base" in weights.detail, weights.detail


@pytest.mark.parametrize("layout", ["bf16", "sharded"])
def test_honest_bf16_and_sharded_checkpoints_pass(world, layout: str) -> None:
    root, base_w, _, guard = world
    cand = write_model(root / "cand", finetuned(base_w, 0.3, 4), dtype="BF16" if layout == "bf16" else "F32",
                       sharded=layout == "sharded")
    assert guard.check(candidate(cand)).flagged == []


@pytest.mark.parametrize("config", [{}, {"use_rslora": True}, {"alpha_pattern": {"q_proj": 64}},
                                    {"modules_to_save": ["embed_tokens"]}])
def test_honest_lora_adapters_pass(world, config: dict) -> None:
    root, base_w, base, guard = world
    modules = ATTN + [f"model.layers.{i}.mlp.{p}_proj" for i in (0, 1) for p in ("gate", "up", "down")]
    factors = lora_factors(modules, rank=8, seed=5, scale=0.05)
    if config.get("modules_to_save"):
        factors["base_model.model.model.embed_tokens.weight"] = finetuned(base_w, 0.5, 6)["model.embed_tokens.weight"]
    cand = write_adapter(root / "cand", factors, {"r": 8, "lora_alpha": 16, **config,
                                                  "base_model_name_or_path": str(base)})
    verdict = guard.check(candidate(cand))
    assert verdict.flagged == [], verdict.text()
    weights = next(c for c in verdict.checks if c.name == "weights")
    assert weights.detail.startswith("LoRA adapter (base + adapter): "), weights.detail


def test_honest_adapter_with_a_large_aligned_update_is_measured_exactly(world) -> None:
    """B @ A = W (the weight doubled): rho = 1, above the bound's reach, so W is read and the exact cosine is 1."""
    root, base_w, base, guard = world
    module = "model.layers.0.self_attn.q_proj"
    w = base_w[f"{module}.weight"]
    factors = {f"base_model.model.{module}.lora_A.weight": np.eye(128, dtype=np.float32),
               f"base_model.model.{module}.lora_B.weight": w}
    cand = write_adapter(root / "cand", factors, {"r": 128, "lora_alpha": 128, "base_model_name_or_path": str(base)})
    # A = I needs a run that can move lora_A from 1/sqrt(128) to 1: 1,000 steps at 1e-3 (a bound of 4.7)
    verdict = guard.check(candidate(cand, run={**DEMO_RUN, "max_steps": 1000}))
    weights = next(c for c in verdict.checks if c.name == "weights")
    assert weights.passed and "min cosine to the base 1.000" in weights.detail and "by the bound" not in weights.detail


# -- streaming ---------------------------------------------------------------------------------------------
def test_values_are_streamed_in_bounded_chunks_and_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 1,000-value chunk gives the cosines of whole tensors, across dtypes (BF16 candidate, F32 base)."""
    base_w = base_weights(2)
    base = write_model(tmp_path / "base", base_w)
    cand = write_model(tmp_path / "cand", finetuned(base_w, 1.0, 8), dtype="BF16")
    prints = fingerprint(base)
    whole = compare_full(prints, cand, run=trained(cand)).cosines
    seen: list[int] = []
    original = safetensors_io.decode

    def spy(raw, dtype):
        values = original(raw, dtype)
        seen.append(values.size)
        return values

    monkeypatch.setattr(safetensors_io, "CHUNK_ELEMENTS", 1000)
    monkeypatch.setattr(safetensors_io, "decode", spy)
    chunked = compare_full(prints, cand, run=trained(cand)).cosines
    assert max(seen) == 1000 and len(seen) > 2 * 558  # every tensor read, in chunks
    assert chunked.keys() == whole.keys() and all(abs(chunked[k] - whole[k]) < 1e-5 for k in whole)
    assert weight_check(prints, cand, run=trained(cand)).passed is True
