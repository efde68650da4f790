import ast
import json
import os
from pathlib import Path

import pytest

from ftagent.benchmarks.base import DatasetBlock
from ftagent.core.errors import StepError
from ftagent.tools.opencompass.inference import inference_config, lookup_specific, tensor_parallel_size
from ftagent.tools.opencompass.merge import is_lora_adapter, merge_reasons
from ftagent.tools.opencompass.render import ModelSpec, chat_template_of, render_config, template_folder

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "opencompass" / "golden"
BLOCK = DatasetBlock(abbr="demo_add", path="/data/benchmarks/demo_add/validation/default.jsonl",
                     input_columns=["question"], output_column="answer",
                     rounds=[{"role": "HUMAN", "prompt": "{question} Put the final answer in \\boxed{}."}],
                     max_out_len=16, evaluator="ftagent.tools.opencompass.oc_ext:BoxedIntAccEvaluator",
                     postprocessor="ftagent.tools.opencompass.oc_ext:last_boxed")
VARIANTS = {
    "hf": ModelSpec(abbr="ft-demo_add", path="/m/full", tokenizer_path="/m/full", max_out_len=16),
    "hf_lora": ModelSpec(abbr="ft-demo_add", path="/m/base", adapter_path="/m/lora", tokenizer_path="/m/lora"),
    "vllm": ModelSpec(backend="vllm", abbr="ft-demo_add", path="/m/full", tokenizer_path="/m/full",
                      tensor_parallel_size=4, temperature=0.6, top_p=0.95, top_k=20),
    "vllm_lora": ModelSpec(backend="vllm", abbr="ft-demo_add", path="/m/base", adapter_path="/m/lora",
                           tokenizer_path="/m/lora"),
    "vllm_merged": ModelSpec(backend="vllm", abbr="ft-demo_add", path="/w/merged_model", tokenizer_path="/w/merged_model"),
}


def test_models_yaml_merge_order(tmp_path):
    y = tmp_path / "models.yaml"
    y.write_text("default: {a: 1, b: 1, tensor_parallel_size: auto}\nQwen/Qwen3: {b: 2}\n"
                 "Qwen/Qwen3-8B: {b: 3}\nQwen: {b: 9}\n")
    assert inference_config("Qwen/Qwen3-8B", 0, y)["b"] == 3  # exact
    assert inference_config("Qwen/Qwen3-8B-Base", 0, y)["b"] == 3  # longest prefix
    assert inference_config("Qwen/Qwen3-4B", 0, y)["b"] == 2
    assert inference_config("Qwen2-7B", 0, y) == {"a": 1, "b": 1, "tensor_parallel_size": 1}  # 'Qwen' too short
    assert lookup_specific("Other", {"default": {"a": 1}}) == {}


def test_repo_models_yaml():
    cfg = inference_config("Qwen/Qwen3-8B", 8)  # no config.json known: TP auto is 1 (test_inference_model_config.py)
    assert cfg["enable_thinking"] is True and cfg["tensor_parallel_size"] == 1 and cfg["top_k"] == 20
    assert inference_config("builtin/tiny-qwen2", 0)["max_out_len"] == 32


@pytest.mark.parametrize("gpus,tp", [(0, 1), (1, 1), (8, 1)])
def test_tensor_parallel_auto_without_model_config(gpus, tp):
    """Without config.json and GPU memory the smallest size vLLM always accepts (the rule with a config:
    tests/unit/test_inference_model_config.py)."""
    assert tensor_parallel_size("auto", gpus, {}) == tp
    assert tensor_parallel_size(4, gpus, {}) == 4


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_render_variants_golden(name):
    src = render_config([BLOCK], VARIANTS[name], benchmark="demo_add", split="validation")
    tree = ast.parse(src)
    assert {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets} >= {"datasets", "models", "infer", "eval"}
    assert "chat_template=" not in src and "meta_template" not in src  # never overrides the model's template
    golden = GOLDEN / f"{name}.py"
    if os.environ.get("FT_UPDATE_GOLDEN"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(src, encoding="utf-8")
    assert src == golden.read_text(encoding="utf-8")


def test_render_lora_and_judge_options():
    hf = render_config([BLOCK], VARIANTS["hf_lora"], benchmark="demo_add", split="test")
    assert "peft_path='/m/lora'" in hf and "tokenizer_path='/m/lora'" in hf and "num_gpus=0" in hf
    vl = render_config([BLOCK], VARIANTS["vllm_lora"], benchmark="demo_add", split="test", num_runs=4, pass_k=2)
    assert "lora_path='/m/lora'" in vl and "enable_lora=True" in vl and "n=4" in vl and "k=2" in vl
    assert "CascadeEvaluator" not in vl
    judged = BLOCK.model_copy(update={"judge": {"model": "gpt-x", "key_env": "ENV", "api_base": "http://j"}})
    src = render_config([judged], VARIANTS["hf"], benchmark="aime25", split="validation")
    assert "CascadeEvaluator" in src and "path='gpt-x'" in src
    ast.parse(src)


def _tok(folder: Path, template: str | None, jinja: bool = False) -> Path:
    folder.mkdir(parents=True)
    cfg = {"eos_token": "<|im_end|>"}
    if template and not jinja:
        cfg["chat_template"] = template
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    if template and jinja:
        (folder / "chat_template.jinja").write_text(template)
    return folder


def test_template_comes_from_trained_model_folder(tmp_path):
    base = _tok(tmp_path / "base", "BASE {{ messages }}")
    trained = _tok(tmp_path / "lora", "TRAINED {{ messages }}", jinja=True)
    assert template_folder(trained, base) == trained.resolve()
    assert chat_template_of(template_folder(trained, base)).startswith("TRAINED")
    bare = _tok(tmp_path / "bare_adapter", None)
    assert template_folder(bare, base) == base.resolve()
    with pytest.raises(StepError, match="no chat template"):
        template_folder(bare, _tok(tmp_path / "nobase", None))


def test_merge_decision(tmp_path):
    lora = tmp_path / "lora"
    lora.mkdir()
    assert not is_lora_adapter(lora)
    (lora / "adapter_config.json").write_text(json.dumps({"r": 8, "modules_to_save": None}))
    assert is_lora_adapter(lora)
    assert merge_reasons(lora, backend="vllm") == []
    assert merge_reasons(lora, backend="hf") == []
    (lora / "adapter_config.json").write_text(json.dumps({"r": 128, "modules_to_save": ["lm_head"]}))
    assert len(merge_reasons(lora, backend="vllm", max_lora_rank=64)) == 2
