"""`ftagent export` on a real session: tiny model, demo_add, heuristic planner, one LoRA loop.

The exported folders (LoRA merged, and ``--no-merge``) are loaded with transformers in the tool env
and must answer the validation items exactly as the evaluation recorded them (OpenCompass's
predictions of that loop), with the same chat template and turn text as the evaluation.

The 60-step LoRA run on the randomly initialised tiny model tends to answer every item alike (measured:
``\\boxed{11}`` ten times), so the test also checks that the merged model does not answer as the base model
does: the adapter really is in the merged weights. (A full fine-tune of 300 steps, exported by hand, gave
ten different answers, all ten equal to OpenCompass's; it costs minutes more than this test should.) A third
test compares next-token logits instead: merged == base + adapter on every prompt, != base.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ftagent.finetune.app import FinetuneOptions, run_finetune
from ftagent.planners.heuristic.planner import HeuristicCoder

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
LORA = {"finetuning_type": "lora", "lora_rank": 8, "lora_alpha": 16, "lora_target": "all",
        "learning_rate": 5.0e-3, "max_steps": 60, "warmup_steps": 5}

# greedy generation as OpenCompass's HuggingFacewithChatTemplate does it: the folder's chat template,
# the turn text without the newline OpenCompass appends (ftagent's TrainedFormatChatModel), one user turn
GENERATE = r'''
import json, sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
folder, base, prompts_file = sys.argv[1:4]
tok = AutoTokenizer.from_pretrained(folder)
if base != "-":
    from peft import PeftModel
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, torch_dtype=torch.float32), folder)
else:
    model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32)
model.eval()
out = []
for prompt in json.load(open(prompts_file)):
    text = tok.apply_chat_template([{"role": "user", "content": prompt.rstrip("\n")}],
                                   add_generation_prompt=True, tokenize=False)
    ids = tok(text, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        gen = model.generate(**ids, max_new_tokens=16, do_sample=False)
    out.append(tok.decode(gen[0][ids["input_ids"].shape[1]:], skip_special_tokens=False))
print(json.dumps(out))
'''


class LoraCoder(HeuristicCoder):
    """The heuristic coder with a short LoRA recipe (the tiny model's own recipe is a full fine-tune)."""

    def code(self, hypothesis, trace, workspace, feedback, ctx):
        result = super().code(hypothesis, trace, workspace, feedback, ctx)
        path = Path(workspace) / "train.yaml"
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
        config.update(LORA)
        path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        return result


@pytest.fixture(scope="module")
def lora_session(tmp_path_factory, tools_env):
    """One real heuristic-planner loop with LoRA; returns (root, session dir)."""
    root = tmp_path_factory.mktemp("export")
    env = {"FT_FILE_PATH": root / "files", "LOG_PATH": root / "log", "WORKSPACE_PATH": root / "ws",
           "FT_TOOLS_ENV": tools_env, "FT_ENV_TYPE": "local", "FT_PLANNER": "heuristic",
           "FT_CODER": f"{__name__}:LoraCoder", "FT_BENCHMARK_LIMIT": "10", "FT_UPPER_DATA_SIZE_LIMIT": "1000"}
    mp = pytest.MonkeyPatch()
    for key in ("CHAT_MODEL", "OPENAI_API_KEY", "OPENAI_API_BASE", "HF_TOKEN"):
        mp.delenv(key, raising=False)
    for key, value in env.items():
        mp.setenv(key, str(value))
    mp.chdir(root)
    summary = run_finetune(FinetuneOptions(benchmark="demo_add", base_model="builtin/tiny-qwen2", loop_n=1,
                                           quiet=True))
    assert summary.status == "completed", summary
    (session,) = (root / "log").iterdir()
    yield root, session
    mp.undo()


def _export(args: list[str], root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "ftagent", "export", *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=900)


def _recorded(root: Path) -> tuple[list[str], list[str]]:
    """The validation prompts and predictions OpenCompass recorded for loop 0."""
    (path,) = [p for p in (root / "ws").rglob("predictions/*/*@validation.json") if "loop_0" in str(p)]
    items = json.loads(path.read_text(encoding="utf-8"))
    rows = [items[k] for k in sorted(items, key=int)]
    return [r["origin_prompt"][0]["prompt"] for r in rows], [r["prediction"] for r in rows]


def _answer(text: str) -> str:
    """A generation up to the end of the turn (OpenCompass cuts at the stop words, greedy decoding may not)."""
    for stop in ("<|im_end|>", "<|endoftext|>"):
        text = text.split(stop)[0]
    return text.strip()


def _generate(tools_python: Path, folder: Path, base: Path | None, prompts: list[str], tmp: Path) -> list[str]:
    prompts_file = tmp / "prompts.json"
    prompts_file.write_text(json.dumps(prompts), encoding="utf-8")
    res = subprocess.run([str(tools_python), "-c", GENERATE, str(folder), str(base or "-"), str(prompts_file)],
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_merged_export_answers_as_evaluated(lora_session, tools_python, tmp_path):
    root, session = lora_session
    res = _export([str(session), "--loop", "0", "--to", str(tmp_path / "merged")], root)
    assert res.returncode == 0, res.stderr
    folder = tmp_path / "merged"
    assert (folder / "config.json").is_file() and not (folder / "adapter_config.json").exists()
    assert (folder / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    tok_config = json.loads((folder / "tokenizer_config.json").read_text())
    template = tok_config.get("chat_template") or (folder / "chat_template.jinja").read_text()
    assert "<|im_start|>" in template  # chatml, the template training wrote
    card = (folder / "README.md").read_text()
    assert "library_name: transformers" in card and "![training loss](loss.png)" in card
    assert str(root) not in card and str(root) not in (folder / "reproduce" / "train.yaml").read_text()
    prompts, predictions = _recorded(root)
    answers = _generate(tools_python, folder, None, prompts, tmp_path)
    assert [_answer(a) for a in answers] == [_answer(p) for p in predictions]
    base = _generate(tools_python, root / "files" / "models" / "builtin" / "tiny-qwen2", None, prompts, tmp_path)
    assert [_answer(a) for a in base] != [_answer(a) for a in answers]  # the adapter is in the merged weights
    print("recorded predictions:", predictions)


def test_adapter_export_answers_as_evaluated(lora_session, tools_python, tmp_path):
    root, session = lora_session
    res = _export([str(session), "--loop", "0", "--no-merge", "--to", str(tmp_path / "adapter")], root)
    assert res.returncode == 0, res.stderr
    folder = tmp_path / "adapter"
    adapter = json.loads((folder / "adapter_config.json").read_text())
    assert adapter["r"] == 8 and (folder / "adapter_model.safetensors").is_file()
    assert "library_name: peft" in (folder / "README.md").read_text()
    base = root / "files" / "models" / "builtin" / "tiny-qwen2"
    prompts, predictions = _recorded(root)
    answers = _generate(tools_python, folder, base, prompts, tmp_path)
    assert [_answer(a) for a in answers] == [_answer(p) for p in predictions]
    again = _export([str(session), "--loop", "0", "--no-merge", "--to", str(folder)], root)
    assert again.returncode == 2 and "not an empty folder" in again.stderr  # nothing overwritten


# the next-token distributions of the merged folder and of base + adapter on every validation prompt;
# greedy answers of this tiny model are often all alike, its logits never are
LOGITS = r'''
import json, sys
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer
merged, adapter, base, prompts_file = sys.argv[1:5]
tok = AutoTokenizer.from_pretrained(merged)
models = {"merged": AutoModelForCausalLM.from_pretrained(merged, torch_dtype=torch.float32),
          "peft": PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, torch_dtype=torch.float32), adapter),
          "base": AutoModelForCausalLM.from_pretrained(base, torch_dtype=torch.float32)}
out = {name: [] for name in models}
for prompt in json.load(open(prompts_file)):
    text = tok.apply_chat_template([{"role": "user", "content": prompt.rstrip("\n")}],
                                   add_generation_prompt=True, tokenize=False)
    ids = tok(text, return_tensors="pt", add_special_tokens=False)
    for name, model in models.items():
        with torch.no_grad():
            out[name].append(model.eval()(**ids).logits[0, -1].tolist())
print(json.dumps(out))
'''


def test_merged_weights_equal_base_plus_adapter(lora_session, tools_python, tmp_path):
    """The merged export computes what base + adapter computes (to float32 rounding), and not the base."""
    root, session = lora_session
    for flag, name in (([], "merged"), (["--no-merge"], "adapter")):
        res = _export([str(session), "--loop", "0", *flag, "--to", str(tmp_path / name)], root)
        assert res.returncode == 0, res.stderr
    prompts, _ = _recorded(root)
    (tmp_path / "prompts.json").write_text(json.dumps(prompts), encoding="utf-8")
    base = root / "files" / "models" / "builtin" / "tiny-qwen2"
    res = subprocess.run([str(tools_python), "-c", LOGITS, str(tmp_path / "merged"), str(tmp_path / "adapter"),
                          str(base), str(tmp_path / "prompts.json")], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    assert res.returncode == 0, res.stderr[-3000:]
    logits = json.loads(res.stdout.strip().splitlines()[-1])

    def max_diff(a: str, b: str) -> float:
        return max(abs(x - y) for row_a, row_b in zip(logits[a], logits[b], strict=True)
                   for x, y in zip(row_a, row_b, strict=True))

    assert len(logits["merged"]) == len(prompts) >= 5
    assert max_diff("merged", "peft") < 1e-3, max_diff("merged", "peft")
    assert max_diff("merged", "base") > 1e-2  # the adapter changed the function
    print(f"max |merged - base+adapter| = {max_diff('merged', 'peft'):.2e}, "
          f"max |merged - base| = {max_diff('merged', 'base'):.2e}")
