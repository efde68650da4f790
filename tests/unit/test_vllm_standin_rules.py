"""The vLLM stand-in (tests/fakes/hf_openai_server.py) refuses to start where vLLM would (issue 30).

The stand-in is started as a real subprocess with this interpreter (it has no torch: a refusal must
come before any model load) on model folders holding only a ``config.json``, with the command line
ftagent itself builds for vLLM (:class:`VllmServeCommand`). The rules are ftagent's own
``vllm_rules.py``, loaded by the stand-in by path; that it serves with accepted flags is
tests/integration/test_vllm_server_eval.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ftagent.tools.opencompass.serving import ServeRequest, VllmServeCommand
from tests.fakes import hf_openai_server as stand_in

STAND_IN = Path(stand_in.__file__)
# the fields vLLM reads, from the models' published config.json (Qwen/Qwen2.5-7B-Instruct,
# Qwen/Qwen2.5-Math-7B-Instruct) and builtin/tiny-qwen2 (ftagent/models/tiny_qwen2_script.py)
QWEN25_7B = {"model_type": "qwen2", "num_attention_heads": 28, "num_key_value_heads": 4,
             "max_position_embeddings": 32768, "torch_dtype": "bfloat16"}
QWEN25_MATH_7B = {**QWEN25_7B, "max_position_embeddings": 4096}
TINY = {"model_type": "qwen2", "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512}


def _model(tmp_path: Path, config: dict, name: str = "model") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


def _adapter(tmp_path: Path, r: int, use_dora: bool = False) -> Path:
    folder = tmp_path / f"adapter_r{r}{'_dora' if use_dora else ''}"
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": r, "lora_alpha": 2 * r,
                                                            "use_dora": use_dora}), encoding="utf-8")
    return folder


def _argv(model: Path, **request: object) -> list[str]:
    """ftagent's vLLM command line for ``request``, without ``python -m vllm...api_server``."""
    argv = VllmServeCommand(Path("/nonexistent/vllm"))(ServeRequest(model=str(model), tokenizer=str(model),
                                                                    port=1, **request))
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    return argv[3:]


def _start(argv: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(STAND_IN), *argv], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", **env})


@pytest.mark.parametrize(("config", "request_", "expected"), [
    (QWEN25_7B, {"tensor_parallel_size": 8}, "tensor_parallel_size=8 does not divide num_attention_heads=28"),
    (TINY, {"tensor_parallel_size": 3}, "tensor_parallel_size=3 does not divide num_attention_heads=4"),
    (QWEN25_MATH_7B, {"max_model_len": 32768}, "max_model_len=32768 is greater than the model's context 4096"),
    (TINY, {"dtype": "bf16"}, "dtype='bf16' is not one of"),
])
def test_flags_vllm_refuses_stop_the_stand_in_before_loading(tmp_path, config, request_, expected):
    res = _start(_argv(_model(tmp_path, config), **request_))
    assert res.returncode == 1, res.stdout + res.stderr
    assert f"ValueError: {expected}" in res.stderr
    assert "loading" not in res.stdout  # refused before any model load (this python has no torch)


def test_bf16_is_refused_on_a_gpu_below_compute_capability_8(tmp_path):
    argv = _argv(_model(tmp_path, TINY), dtype="bfloat16")
    res = _start(argv, FT_STANDIN_COMPUTE_CAPABILITY="7.5")  # a T4
    assert res.returncode == 1 and "dtype=bfloat16 needs compute capability >= 8.0" in res.stderr
    assert stand_in.refusals(stand_in.parse_args(argv)) == []  # no GPU played: no dtype rule


@pytest.mark.parametrize(("r", "dora", "max_rank", "expected"), [
    (8, True, 64, "LoRA adapter 'ft': use_dora: vLLM does not yet support DoRA"),
    (128, False, 64, "LoRA adapter 'ft': LoRA rank 128 is greater than max_lora_rank 64"),
    (32, False, None, "LoRA adapter 'ft': LoRA rank 32 is greater than max_lora_rank 16"),  # vLLM's default
    (8, False, 48, "max_lora_rank=48 is not one of"),
])
def test_adapters_vllm_refuses_stop_the_stand_in(tmp_path, r, dora, max_rank, expected):
    argv = _argv(_model(tmp_path, TINY), lora_modules={"ft": str(_adapter(tmp_path, r, dora))},
                 max_lora_rank=max_rank)
    res = _start(argv)
    assert res.returncode == 1 and f"ValueError: {expected}" in res.stderr, res.stderr


def test_flags_ftagent_gives_a_servable_model_pass_every_rule(tmp_path):
    model = _model(tmp_path, TINY)
    for request in ({}, {"max_model_len": 512, "tensor_parallel_size": 2, "dtype": "bfloat16"},
                    {"lora_modules": {"ft": str(_adapter(tmp_path, 8))}, "max_lora_rank": 64}):
        assert stand_in.refusals(stand_in.parse_args(_argv(model, **request))) == [], request
    ok = _model(tmp_path, QWEN25_7B, "qwen7b")
    assert stand_in.refusals(stand_in.parse_args(_argv(ok, tensor_parallel_size=4, max_model_len=32768))) == []


def test_the_rules_are_ftagents_own_file(tmp_path):
    from ftagent.tools.opencompass import vllm_rules

    assert stand_in.RULES_FILE == Path(vllm_rules.__file__).resolve()
    other = tmp_path / "rules.py"
    other.write_text("def refusals(config, **kw):\n    return ['from the other file']\n", encoding="utf-8")
    res = _start(_argv(_model(tmp_path, TINY)), FT_VLLM_RULES=str(other))
    assert res.returncode == 1 and "ValueError: from the other file" in res.stderr
