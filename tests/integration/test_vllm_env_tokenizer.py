"""A model saved by the tool env (transformers 4) loads with the vLLM env's pins (transformers 5).

vLLM itself (CUDA wheels, GBs) cannot be installed on the CPU machines, so this builds, once, a small
venv with exactly the tokenizer-side pins of ``configs/envs/vllm.lock.txt`` (transformers,
tokenizers, huggingface_hub, jinja2 ... without torch), under ``FT_FILE_PATH/envs/vllm-tokenizers``,
and checks that the built-in model's tokenizer and config load in both envs and that the chat
template turns the same prompt into the same token ids.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from ftagent.core.paths import config_file
from ftagent.runners.vllmenv import check_env_python

PINNED = ("transformers", "tokenizers", "huggingface_hub", "jinja2", "markupsafe", "numpy", "safetensors", "regex",
          "pyyaml", "packaging", "tqdm", "filelock", "fsspec", "hf-xet", "httpx", "typer")


def _pins() -> list[str]:
    lines = config_file("envs", "vllm.lock.txt").read_text().splitlines()
    return [ln for ln in lines if re.split(r"==", ln)[0].lower() in PINNED]


@pytest.fixture(scope="session")
def tokenizer_env(tools_env: Path) -> Path:
    env = tools_env.parent / "vllm-tokenizers"
    python = env / "bin" / "python"
    pins = _pins()
    assert any(p.startswith("transformers==5") for p in pins), pins
    marker = env / "pins.txt"
    if not (python.exists() and marker.is_file() and marker.read_text() == "\n".join(pins)):
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(env)], check=True)
        proc = subprocess.run([str(python), "-m", "pip", "install", "-q", *pins], capture_output=True, text=True,
                              timeout=1200)
        if proc.returncode:
            pytest.fail(f"cannot build the tokenizer env with the vLLM pins: {proc.stderr[-1500:]}")
        marker.write_text("\n".join(pins))
    return env


def test_tool_env_model_loads_with_vllm_pins(tools_python: Path, tiny_model: Path, tokenizer_env: Path) -> None:
    ours = check_env_python(tools_python, tiny_model)
    theirs = check_env_python(tokenizer_env / "bin" / "python", tiny_model)
    assert ours["versions"]["transformers"].startswith("4.")
    assert theirs["versions"]["transformers"].startswith("5.")
    for found in (ours, theirs):
        assert not [e for e in found["errors"] if e.startswith("load ")], found["errors"]
        assert found["model"]["vocab"] == 512 and found["model"]["model_type"] == "qwen2"
    assert ours["model"]["prompt_ids"] == theirs["model"]["prompt_ids"]
