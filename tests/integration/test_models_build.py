"""Building builtin/tiny-qwen2 with the real tool env."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from ftagent.core.errors import EnvironmentFailure
from ftagent.models.base_model import base_model_dir, fetch_base_model
from ftagent.models.builtin import build_builtin, is_built

pytestmark = pytest.mark.integration

EXPECTED_FILES = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                  "tokenizer_config.json", "special_tokens_map.json"}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_tiny_model_files_and_config(tiny_model: Path, tools_python: Path) -> None:
    names = {p.name for p in tiny_model.iterdir()}
    assert EXPECTED_FILES <= names
    cfg = json.loads((tiny_model / "config.json").read_text())
    assert (cfg["model_type"], cfg["hidden_size"], cfg["num_hidden_layers"]) == ("qwen2", 128, 2)
    assert (cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["intermediate_size"]) == (4, 2, 512)
    assert cfg["tie_word_embeddings"] is True and cfg["vocab_size"] == 512
    assert cfg["transformers_version"].startswith("4.")
    tok_cfg = json.loads((tiny_model / "tokenizer_config.json").read_text())
    assert tok_cfg["model_input_names"] == ["input_ids", "attention_mask"]
    assert is_built(tiny_model, "tiny-qwen2")
    # The tool env loads it back: digits are single tokens, ChatML renders, no token_type_ids.
    probe = (
        "import sys, json; from transformers import AutoTokenizer, AutoModelForCausalLM\n"
        "t = AutoTokenizer.from_pretrained(sys.argv[1]); m = AutoModelForCausalLM.from_pretrained(sys.argv[1])\n"
        "enc = t('12345')\n"
        "text = t.apply_chat_template([{'role':'user','content':'hi'}], tokenize=False, add_generation_prompt=True)\n"
        "print(json.dumps({'n': len(enc['input_ids']), 'keys': sorted(enc.keys()), 'text': text,"
        " 'params': sum(p.numel() for p in m.parameters())}))\n"
    )
    out = subprocess.run([str(tools_python), "-c", probe, str(tiny_model)], capture_output=True, text=True,
                         timeout=300, check=True)
    info = json.loads(out.stdout.strip().splitlines()[-1])
    assert info["n"] == 5
    assert info["keys"] == ["attention_mask", "input_ids"]
    assert info["text"] == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert info["params"] == 558_208


def test_same_seed_same_weights_and_reuse(tiny_model: Path, tools_python: Path, tmp_path: Path) -> None:
    again = build_builtin("tiny-qwen2", tmp_path / "again", tools_python)
    assert _sha(again / "model.safetensors") == _sha(tiny_model / "model.safetensors")
    assert _sha(again / "tokenizer.json") == _sha(tiny_model / "tokenizer.json")
    # A second call reuses the build (marker) instead of rebuilding.
    mtime = (again / "model.safetensors").stat().st_mtime_ns
    assert build_builtin("tiny-qwen2", again, tools_python) == again.absolute()
    assert (again / "model.safetensors").stat().st_mtime_ns == mtime
    other = build_builtin("tiny-qwen2", tmp_path / "seed3", tools_python, seed=3)
    assert _sha(other / "model.safetensors") != _sha(tiny_model / "model.safetensors")


def test_fetch_base_model_builtin_and_offline_hub(tools_python: Path, tmp_path: Path) -> None:
    """As a session does: start-up computes the folder (``base_model_dir``), the scenario's build fills it."""
    path = fetch_base_model("builtin/tiny-qwen2", base_model_dir("builtin/tiny-qwen2", tmp_path), tools_python, tmp_path)
    assert path == (tmp_path / "models" / "builtin" / "tiny-qwen2").absolute()
    assert (path / "model.safetensors").is_file()
    with pytest.raises(EnvironmentFailure, match="cannot be downloaded"):
        fetch_base_model("nobody-here/no-such-model", base_model_dir("nobody-here/no-such-model", tmp_path),
                         tools_python, tmp_path)


def test_build_through_the_local_runner_sandboxed(tools_env: Path, tiny_model: Path, tmp_path: Path) -> None:
    from ftagent.runners.local import LocalRunner

    runner = LocalRunner(tools_env, sandbox="auto", gpu=False)
    out = build_builtin("tiny-qwen2", tmp_path / "models" / "builtin" / "tiny-qwen2", runner)
    assert _sha(out / "model.safetensors") == _sha(tiny_model / "model.safetensors")


def test_check_real_tools_env(tools_env: Path) -> None:
    from ftagent.runners.toolenv import check_tools_env

    report = check_tools_env(tools_env, gpu=False)
    assert report.ok, report.errors
    assert report.torch_cpu is True and report.versions["transformers"].startswith("4.")
    assert set(report.versions) == {"torch", "transformers", "llamafactory", "opencompass", "peft"}
