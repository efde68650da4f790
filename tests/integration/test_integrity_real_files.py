"""Issue 39 item 3 on the real files: the red team's model — builtin/tiny-qwen2 (seed 2, written by the tool
env's transformers) with 23 of its 26 tensors taken from another initialisation (seed 7), keeping the three
tensors d350dfe's check sampled (the embeddings, the first and the last layer's q_proj) — passed weights,
architecture, tokenizer and chat template at d350dfe. Every tensor is compared now: ``weights`` flags it,
and nothing else does (the other files are the base's). The honest real LLaMA-Factory outputs (full and
LoRA, and the merged LoRA) are checked in tests/integration/test_training.py.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from ftagent.models.builtin import build_builtin
from tests.helpers.model_files import candidate, guard_for

pytestmark = pytest.mark.integration
SAMPLED = ("model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
           "model.layers.1.self_attn.q_proj.weight")


def _tensors(path: Path) -> tuple[dict, bytes, bytes]:
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n]), data[:8 + n], data[8 + n:]


def test_the_red_teams_model_from_the_real_files_is_flagged(tiny_model: Path, tools_python: Path,
                                                            tmp_path: Path) -> None:
    other = build_builtin("tiny-qwen2", tmp_path / "seed7", tools_python, seed=7)
    cand = tmp_path / "cand"
    shutil.copytree(tiny_model, cand)
    header, head, mine = _tensors(tiny_model / "model.safetensors")
    other_header, _, theirs = _tensors(other / "model.safetensors")
    body = bytearray(mine)
    replaced = 0
    for name, meta in header.items():
        if name == "__metadata__" or name in SAMPLED:
            continue
        lo, hi = meta["data_offsets"]
        o_lo, o_hi = other_header[name]["data_offsets"]
        body[lo:hi] = theirs[o_lo:o_hi]
        replaced += 1
    assert replaced == 23
    (cand / "model.safetensors").write_bytes(head + bytes(body))
    guard = guard_for(tmp_path, tiny_model)
    verdict = guard.check(candidate(cand))
    flags = {c.name: c.detail for c in verdict.flagged}
    assert set(flags) == {"weights"}, flags
    assert "below cosine 0.1 to the base" in flags["weights"], flags
    passed = {c.name for c in verdict.checks if c.passed}
    assert {"tokenizer", "chat_template", "architecture", "decoding"} <= passed
