"""Issue 43 in the real tool env: the weights are checked against ``config.json`` before any evaluation.

``weights_script.py`` instantiates the config's class on the ``meta`` device (transformers 4.57 of the tool
env) and compares the checkpoint's safetensors headers with it as ``from_pretrained`` does. Real folders:
``builtin/tiny-qwen2`` (fits), its weights under a Llama ``config.json`` (6 attention biases would be
dropped), under one with a narrower MLP (shapes differ), under a Bert one (every weight newly initialised), a real PEFT LoRA adapter of it (fits) and the
same adapter with its tensors renamed to modules the base lacks (PEFT drops them, the base is scored).
Before: each misfit was evaluated (rc 0, score 0.0, the load warnings only in OpenCompass's log).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ftagent.core.errors import StepError
from ftagent.runners.local import LocalRunner
from ftagent.tools.opencompass.weights import weights_problem

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]

MAKE_ADAPTER = r"""
import sys
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
peft = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
peft.save_pretrained(sys.argv[2])
"""
RENAME = r"""
import sys
from safetensors.torch import load_file, save_file
path = sys.argv[1] + "/adapter_model.safetensors"
tensors = load_file(path)
save_file({k.replace("self_attn.q_proj", "self_attn.query"): v for k, v in tensors.items()}, path,
          metadata={"format": "pt"})
"""


def _with_config(tiny: Path, target: Path, config: dict) -> Path:
    shutil.copytree(tiny, target)
    (target / "config.json").write_text(json.dumps(config))
    return target


@pytest.fixture(scope="module")
def folders(tiny_model: Path, tools_python: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("weights")
    config = json.loads((tiny_model / "config.json").read_text())
    out = {"fits": tiny_model,
           "llama": _with_config(tiny_model, root / "llama_over_qwen2",
                                 {**config, "model_type": "llama", "architectures": ["LlamaForCausalLM"]}),
           "narrow": _with_config(tiny_model, root / "narrow_mlp", {**config, "intermediate_size": 256}),
           "bert": _with_config(tiny_model, root / "bert_over_qwen2",
                                {"model_type": "bert", "architectures": ["BertForMaskedLM"], "hidden_size": 64,
                                 "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
                                 "vocab_size": config["vocab_size"]})}
    adapter = root / "adapter"
    subprocess.run([str(tools_python), "-c", MAKE_ADAPTER, str(tiny_model), str(adapter)], check=True, timeout=600)
    moved = root / "adapter_moved"
    shutil.copytree(adapter, moved)
    subprocess.run([str(tools_python), "-c", RENAME, str(moved)], check=True, timeout=600)
    out.update(adapter=adapter, adapter_moved=moved)
    return out


def _check(name: str, folders: dict[str, Path], tools_env: Path, tmp_path: Path) -> str | None:
    base = folders["fits"] if name.startswith("adapter") else None
    return weights_problem(folders[name], base, LocalRunner(tools_env, sandbox="none"), work_dir=tmp_path / name,
                           cache_dir=tmp_path / "cache", digest=name, timeout=600)


@pytest.mark.parametrize("name,fragments", [
    ("fits", None),
    ("adapter", None),
    ("llama", ["transformers builds LlamaForCausalLM", "6 tensor(s) in the checkpoint but not in the model",
               "model.layers.0.self_attn.k_proj.bias"]),
    ("narrow", ["6 tensor(s) with another shape than the model's", "model.layers.0.mlp.down_proj.weight [128, 512] vs "
                "[128, 256]"]),
    ("bert", ["transformers builds BertLMHeadModel", "44 tensor(s) missing from the checkpoint (they would be newly "
              "initialised): bert.embeddings.LayerNorm.bias", "26 tensor(s) in the checkpoint but not in the model"]),
    ("adapter_moved", ["4 tensor(s) of the adapter that land on no module of the base",
                       "base_model.model.model.layers.0.self_attn.query.lora_A.weight"]),
])
def test_the_real_check(name, fragments, folders, tools_env, tmp_path):
    problem = _check(name, folders, tools_env, tmp_path)
    if fragments is None:
        assert problem is None
        return
    assert problem is not None and all(f in problem for f in fragments), problem


def test_eval_refuses_weights_it_would_not_load_before_opencompass(folders, tools_env, tmp_path):
    """The real CLI: exit 2 naming --model and the misfit; no OpenCompass run (no run folder)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FT_", "CHAT_", "OPENAI_"))}
    env.update(PYTHONPATH=str(REPO), FT_TOOLS_ENV=str(tools_env), FT_FILE_PATH=str(tmp_path / "files"),
               FT_ENV_TYPE="local", FT_BENCHMARK_LIMIT="4")
    proc = subprocess.run([sys.executable, "-m", "ftagent", "eval", "--model", str(folders["llama"]),
                           "--benchmark", "demo_add"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    lines = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and lines[0].startswith(f"error: --model {folders['llama']}: the model was not evaluated")
    assert "LlamaForCausalLM" in lines[0] and "Traceback" not in proc.stderr
    assert not list((tmp_path / "files").rglob("summary_*.csv"))  # OpenCompass never ran


def test_a_sessions_candidate_is_refused_by_the_evaluation_step(folders, tools_env, tmp_path):
    """A session's candidate goes through the same evaluation (the evaluator component calls
    ``evaluate_splits_of_path``): a StepError EVAL, the loop fails with it, before OpenCompass runs."""
    from ftagent.benchmarks import get_benchmark
    from ftagent.core.settings import load_settings
    from ftagent.tools.opencompass.runs import evaluate_splits_of_path

    settings = load_settings(file_path=tmp_path / "ft", benchmark_limit=4)
    with pytest.raises(StepError) as err:
        evaluate_splits_of_path(folders["bert"], None, benchmark=get_benchmark("demo_add"), settings=settings,
                                runner=LocalRunner(tools_env, sandbox="none"), work_dir=tmp_path / "work",
                                model_name="builtin/tiny-qwen2", timeout=900)
    assert err.value.error_type.value == "EVAL" and "BertLMHeadModel" in err.value.message
    assert not list((tmp_path / "work").rglob("summary_*.csv"))
