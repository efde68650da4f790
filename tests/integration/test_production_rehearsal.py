"""The production path rehearsed on CPU (issue 30): one session with every production switch on at once.

Each switch has its own test; this one turns them all on in one real session (tiny model, one LoRA loop,
ten items per split) and then exports it:

* the LLM planner, through the scripted OpenAI server (:mod:`tests.fakes.openai_server`): proposal,
  data script, config and feedback, each recorded with its stage;
* the bubblewrap sandbox (``FT_SANDBOX=bwrap``, no ``FT_ALLOW_UNSANDBOXED``): every tool command is
  wrapped (the runner's bwrap argv is spied on) and the LLM-written data script sees bwrap as PID 1;
* the LLM judge behind the session's judge gateway: a user benchmark YAML with ``judge: true``
  (demo_add's items, math-verify); every rule miss goes to a second fake server, recorded as stage
  ``judge``;
* the ``vllm-server`` evaluation backend through the vLLM stand-in (:mod:`tests.fakes.hf_openai_server`,
  started with ftagent's own vLLM command line, which it checks with vLLM's start-up rules): the
  baseline's full model and loop 0's LoRA adapter served natively;
* TensorBoard (``FT_REPORT_TO=tensorboard``): the loop's event files hold the training loss and the
  validation score;
* ``ftagent export`` of the session's loop 0: a merged model folder with its model card, and the adapter.

The export tests (formerly tests/integration/test_export.py, on a session of their own) run on this
session: the exported folders, loaded with transformers in the tool env, must answer the validation items
exactly as the evaluation recorded them (here: as the stand-in served them), and the merged weights must
compute base + adapter. The 60-step LoRA run on the randomly initialised tiny model tends to answer every
item alike, so the merged model is also checked not to answer as the base model does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ftagent.benchmarks.base import read_jsonl
from ftagent.engine.events import read_events
from ftagent.engine.session import list_snapshots
from ftagent.finetune.app import FinetuneOptions, run_finetune
from ftagent.runners import local as local_runner
from ftagent.runners.sandbox import probe_bwrap
from ftagent.tools.opencompass import runs as oc_runs
from tests.fakes.openai_server import FakeOpenAIServer, Reply
from tests.integration.test_tracking import READ_EVENTS
from tests.integration.test_vllm_server_eval import StandInServe

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
JUDGE_KEY = "sk-REAL-JUDGE-KEY-0777"
PLANNER_KEY = "sk-test-relay-000777"
BENCH = """\
name: demo_add_judged
description: >-
  'What is a + b?' for two-digit integers a and b; the sum inside \\\\boxed{}. Scored by math-verify,
  rule misses re-checked by an LLM judge.
data: {loader: demo_add}
prompt: "{question} Put the final answer in \\\\boxed{}."
answer: answer
metric: math_verify
judge: true
max_out_len: 16
related_datasets: [demo_add]
"""

PROPOSAL = """```json
{"reason": "The demo_add rows use the benchmark's wording, so train on them first.",
 "hypothesis": "[Data] The demo_add rows as they are. [Training] LoRA rank 8 on all modules, lr 5e-3, 60 steps.",
 "task": "1) data: copy the demo_add rows into data.json (100 in debug mode). 2) training: LoRA r 8, all, chatml, cutoff 64, lr 5e-3, 60 steps, batch 16.",
 "skip_data_processing": false}
```"""

# the LLM-written script also says where it runs (under bwrap, PID 1 of its namespace is bwrap) and
# records what it can see (its environment, whether the benchmark folder exists)
SCRIPT = """import argparse
import json
import os
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--debug", action="store_true")
args = parser.parse_args()
print("pid1=" + Path("/proc/1/comm").read_text().strip())
root = Path(os.environ["FT_DATASETS_DIR"]) / "demo_add"
rows = json.loads((root / "demo_add_train.json").read_text(encoding="utf-8"))
rows = rows[:100] if args.debug else rows[:2000]
Path("data.json").write_text(json.dumps(rows), encoding="utf-8")
benchmarks = root.parent / "benchmarks"  # FT_FILE_PATH/benchmarks: must be invisible here
Path("seen.json").write_text(json.dumps({"env": dict(os.environ), "benchmarks_visible": benchmarks.exists()}),
                             encoding="utf-8")
print(f"kept {len(rows)} rows")
"""

CONFIG = """```yaml
finetuning_type: lora
lora_rank: 8
lora_alpha: 16
lora_target: all
template: chatml
cutoff_len: 64
per_device_train_batch_size: 16
learning_rate: 5.0e-3
max_steps: 60
warmup_steps: 5
logging_steps: 10
seed: 2
save_strategy: "no"
this_key_does_not_exist: 3
```"""

FEEDBACK = """{"reason": "The adapter trained; the loss fell.", "next_step": "Train longer.",
 "code_summary": "LoRA r 8, 60 steps"}"""


class BwrapSpy:
    """Calls through to the runner's ``bwrap_argv`` and keeps every command line it built."""

    def __init__(self) -> None:
        self.real = local_runner.bwrap_argv
        self.argvs: list[list[str]] = []

    def __call__(self, cmd, **kw):  # noqa: ANN001, ANN003, ANN204
        argv = self.real(cmd, **kw)
        self.argvs.append(argv)
        return argv


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory, tools_env, tools_python):
    """The session (every switch on), run once, and its loop 0 exported merged; returns what each switch
    left behind. The settings stay in the environment until the module's tests are done (exports)."""
    works, why = probe_bwrap()
    if not works:  # the LLM planner's code runs only confined
        if os.environ.get("FTAGENT_REQUIRE_SANDBOX") == "1":
            pytest.fail(f"bubblewrap is required here (FTAGENT_REQUIRE_SANDBOX=1) but unusable: {why}")
        pytest.skip(f"bubblewrap unusable ({why}): `make system` or apt-get install bubblewrap")
    root = tmp_path_factory.mktemp("rehearsal")
    bench_dir = root / "benchmarks"
    bench_dir.mkdir()
    (bench_dir / "demo_add_judged.yaml").write_text(BENCH, encoding="utf-8")
    mp = pytest.MonkeyPatch()
    for key in ("CHAT_MODEL", "OPENAI_API_KEY", "OPENAI_API_BASE", "FT_PLANNER", "CHAT_STREAM", "HF_TOKEN",
                "FT_ALLOW_UNSANDBOXED", "FT_EVAL_BACKEND", "FT_JUDGE_API_KEY", "FT_LLM_BUDGET_USD"):
        mp.delenv(key, raising=False)
    serve = StandInServe(tools_python)
    mp.setattr(oc_runs, "VllmServeCommand", lambda _env_path: serve)  # the stand-in in place of the vLLM env
    spy = BwrapSpy()
    mp.setattr(local_runner, "bwrap_argv", spy)
    mp.chdir(root)
    planner_srv = FakeOpenAIServer([Reply(PROPOSAL), Reply("```python\n" + SCRIPT + "```\n"), Reply(CONFIG),
                                    Reply(FEEDBACK)])
    judge_srv = FakeOpenAIServer(default=Reply("B", usage=(200, 1)))  # every rule miss judged wrong
    env = {"FT_FILE_PATH": root / "files", "LOG_PATH": root / "log", "WORKSPACE_PATH": root / "ws",
           "FT_TOOLS_ENV": tools_env, "FT_ENV_TYPE": "local", "FT_SANDBOX": "bwrap",
           "CHAT_MODEL": "openai/scripted", "OPENAI_API_KEY": PLANNER_KEY, "CHAT_STREAM": "true",
           "FT_JUDGE_API_KEY": JUDGE_KEY, "FT_JUDGE_MODEL": "gpt-4",
           "FT_EVAL_BACKEND": "vllm-server", "FT_REPORT_TO": "tensorboard",
           "FT_BENCHMARK_PATHS": bench_dir, "FT_BENCHMARK_LIMIT": "10", "FT_UPPER_DATA_SIZE_LIMIT": "2000"}
    for key, value in env.items():
        mp.setenv(key, str(value))
    try:
        with planner_srv, judge_srv:
            planner_url = planner_srv.base_url
            mp.setenv("OPENAI_API_BASE", planner_url)
            mp.setenv("FT_JUDGE_API_BASE", judge_srv.base_url)
            summary = run_finetune(FinetuneOptions(benchmark="demo_add_judged", base_model="builtin/tiny-qwen2",
                                                   loop_n=1, quiet=True))
        (session,) = (root / "log").iterdir()
        for key in ("CHAT_MODEL", "OPENAI_API_KEY", "OPENAI_API_BASE", "FT_JUDGE_API_KEY", "FT_JUDGE_API_BASE"):
            mp.delenv(key)  # export needs no LLM
        merged = _export([str(session), "--loop", "0", "--to", str(root / "export")], root)
        yield {"root": root, "session": session, "summary": summary, "serve": serve, "bwrap": spy.argvs,
               "planner_requests": planner_srv.chat_requests, "judge_requests": judge_srv.chat_requests,
               "planner_url": planner_url, "export": merged}
    finally:
        mp.undo()


def _export(args: list[str], root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "ftagent", "export", *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=900)


def test_the_session_completes_with_the_llm_planner(rehearsal):
    assert rehearsal["summary"].status == "completed", rehearsal["summary"]
    session = rehearsal["session"]
    report = json.loads((session / "report.json").read_text())
    assert report["planner"] == "llm"
    (loop0,) = [r for r in report["loops"] if r["loop"] == 0]
    assert loop0["val_score"] is not None and report["baseline_val"] is not None, report
    records = [json.loads(p.read_text()) for p in sorted((session / "llm").glob("*.json"))]
    stages = [r.get("stage") for r in records]
    for stage in ("proposal", "data_coder", "config_coder", "feedback"):
        assert stage in stages, stages
    assert len(rehearsal["planner_requests"]) == 4  # every scripted reply used at the first try
    trained = yaml.safe_load(next((rehearsal["root"] / "ws").rglob("loop_0/train.yaml")).read_text())
    assert trained["finetuning_type"] == "lora" and trained["lora_rank"] == 8


def test_the_loop_recorded_each_step_and_nothing_leaked(rehearsal):
    """(Formerly test_agent_loop.py's LLM-planner loop.) Every step's event, the unknown config key dropped,
    the forecast before the first proposal, no planner key in any record, no test item in any prompt or
    in what the generated code could see."""
    root, session, requests = rehearsal["root"], rehearsal["session"], rehearsal["planner_requests"]
    assert rehearsal["summary"].failures == []
    events = list(read_events(session / "events.jsonl"))
    assert {"hypothesis", "code_round", "validation", "training", "benchmark_result", "feedback"} <= {
        e.type for e in events}
    validation = next(e for e in events if e.type == "validation")
    assert any(k.startswith("this_key_does_not_exist") for k in validation.dropped_keys)
    forecast = next(e for e in events if e.type == "forecast").forecast  # recorded after the baseline
    assert forecast.planner == "llm" and forecast.llm.calls > 0 and forecast.train_probe.s_per_step > 0
    assert "measured once before the first run" in requests[0].raw  # the proposal prompt gets the estimate
    scores = {(e.split, e.baseline): e.score for e in events if e.type == "benchmark_result"}
    assert scores[("validation", False)] is not None and scores[("test", False)] is not None
    for path in [session / "events.jsonl", *session.glob("llm/*.json"), *list_snapshots(session)]:
        text = path.read_text(encoding="utf-8")
        assert PLANNER_KEY not in text and JUDGE_KEY not in text, path
    questions = [r["question"] for r in read_jsonl(root / "files" / "benchmarks" / "demo_add_judged" / "test.jsonl")]
    assert questions, "the test split must exist for the check to mean anything"
    prompts = "\n".join(r.raw for r in requests)
    assert not [q for q in questions if q in prompts]
    seen = json.loads(next((root / "ws").rglob("seen.json")).read_text())
    env_text = json.dumps(seen["env"])
    assert not seen["benchmarks_visible"] and "benchmarks" not in env_text  # the sandbox hides them
    assert PLANNER_KEY not in env_text and JUDGE_KEY not in env_text and rehearsal["planner_url"] not in env_text
    assert seen["env"]["OPENAI_API_KEY"].startswith("ftgw-")  # the script gets the session gateway's token
    assert seen["env"]["OPENAI_API_BASE"].startswith("http://127.0.0.1:")
    assert not [q for q in questions if q in env_text]


def test_every_tool_command_ran_in_bwrap(rehearsal):
    session, argvs = rehearsal["session"], rehearsal["bwrap"]
    runs = [e for e in read_events(session / "events.jsonl") if e.type == "run"]
    purposes = {e.purpose for e in runs}
    assert {"data_debug", "data", "train", "eval"} <= purposes, purposes
    assert len(argvs) >= len(runs) and all(Path(a[0]).name == "bwrap" for a in argvs)
    # the loop's runs of the LLM's script (the forecast probe's workspace is removed after it)
    ws = rehearsal["root"] / "ws"
    logs = [Path(e.log_file) for e in runs if e.purpose in ("data_debug", "data") and e.log_file
            and ws in Path(e.log_file).parents]
    assert logs and all("pid1=bwrap" in p.read_text(encoding="utf-8") for p in logs)  # confined


def test_the_judge_went_through_the_gateway(rehearsal):
    session, sent = rehearsal["session"], rehearsal["judge_requests"]
    assert sent, "no judge call reached the judge upstream"
    assert all(r.headers["authorization"] == f"Bearer {JUDGE_KEY}" for r in sent)  # the real key upstream only
    judged = [json.loads(p.read_text()) for p in (session / "llm").glob("*.json")]
    judged = [r for r in judged if r.get("stage") == "judge"]
    assert len(judged) == len(sent) and all(r["model"] == "gpt-4" for r in judged)
    configs = list((rehearsal["root"] / "ws").rglob("oc_*.py"))
    assert configs and not any(JUDGE_KEY in c.read_text(encoding="utf-8") for c in configs)
    assert JUDGE_KEY not in (session / "events.jsonl").read_text(encoding="utf-8")


def test_evaluation_was_served_by_the_vllm_stand_in(rehearsal):
    requests = rehearsal["serve"].requests
    adapters = [r for r in requests if r.lora_modules]
    assert len(requests) > len(adapters) >= 1  # the baseline's full model, loop 0's adapter served natively
    assert all(set(r.lora_modules) == {"ft"} and (Path(r.lora_modules["ft"]) / "adapter_config.json").is_file()
               and r.max_lora_rank for r in adapters)
    logs = list((rehearsal["root"] / "ws").rglob("model_server.log"))
    assert logs and all("POST /v1/chat/completions" in p.read_text() for p in logs)
    assert not any("ValueError" in p.read_text() or "ignoring unknown" in p.read_text() for p in logs)


def test_tensorboard_holds_the_loop(rehearsal, tools_python):
    logdir = rehearsal["session"] / "tensorboard" / "loop_0"
    assert list(logdir.glob("events.out.tfevents.*")), list(rehearsal["session"].rglob("*tfevents*"))
    out = subprocess.run([str(tools_python), "-c", READ_EVENTS, str(logdir)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    scalars = json.loads(out.stdout.strip().splitlines()[-1])
    assert scalars.get("train/loss") and any(tag.startswith("ftagent/validation/") for tag in scalars), scalars


# --- export (the folders answer as the evaluation recorded) -------------------------------------------

# greedy generation as OpenCompass's HuggingFacewithChatTemplate does it (the stand-in generates the same,
# tests/integration/test_vllm_server_eval.py): the folder's chat template, the turn text without the newline
# OpenCompass appends (ftagent's TrainedFormatChatModel), one user turn
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


@pytest.fixture(scope="module")
def adapter_export(rehearsal) -> Path:
    """Loop 0 exported as its adapter (``--no-merge``)."""
    root = rehearsal["root"]
    res = _export([str(rehearsal["session"]), "--loop", "0", "--no-merge", "--to", str(root / "adapter")], root)
    assert res.returncode == 0, res.stderr
    return root / "adapter"


def test_merged_export_has_a_card_and_answers_as_evaluated(rehearsal, tools_python, tmp_path):
    root, res = rehearsal["root"], rehearsal["export"]
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    folder = root / "export"
    assert (folder / "config.json").is_file() and not (folder / "adapter_config.json").exists()
    assert (folder / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    tok_config = json.loads((folder / "tokenizer_config.json").read_text())
    template = tok_config.get("chat_template") or (folder / "chat_template.jinja").read_text()
    assert "<|im_start|>" in template  # chatml, the template training wrote
    card = (folder / "README.md").read_text()
    assert "library_name: transformers" in card and "![training loss](loss.png)" in card
    assert "demo_add_judged" in card and JUDGE_KEY not in card and PLANNER_KEY not in card
    assert str(root) not in card and str(root) not in (folder / "reproduce" / "train.yaml").read_text()
    prompts, predictions = _recorded(root)
    answers = _generate(tools_python, folder, None, prompts, tmp_path)
    assert [_answer(a) for a in answers] == [_answer(p) for p in predictions]  # served by the stand-in
    base = _generate(tools_python, root / "files" / "models" / "builtin" / "tiny-qwen2", None, prompts, tmp_path)
    assert [_answer(a) for a in base] != [_answer(a) for a in answers]  # the adapter is in the merged weights
    print("recorded predictions:", predictions)


def test_adapter_export_answers_as_evaluated(rehearsal, adapter_export, tools_python, tmp_path):
    root, folder = rehearsal["root"], adapter_export
    adapter = json.loads((folder / "adapter_config.json").read_text())
    assert adapter["r"] == 8 and (folder / "adapter_model.safetensors").is_file()
    assert "library_name: peft" in (folder / "README.md").read_text()
    base = root / "files" / "models" / "builtin" / "tiny-qwen2"
    prompts, predictions = _recorded(root)
    answers = _generate(tools_python, folder, base, prompts, tmp_path)
    assert [_answer(a) for a in answers] == [_answer(p) for p in predictions]
    again = _export([str(rehearsal["session"]), "--loop", "0", "--no-merge", "--to", str(folder)], root)
    assert again.returncode == 2 and "not an empty folder" in again.stderr  # nothing overwritten


def test_merged_weights_equal_base_plus_adapter(rehearsal, adapter_export, tools_python, tmp_path):
    """The merged export computes what base + adapter computes (to float32 rounding), and not the base."""
    root = rehearsal["root"]
    assert rehearsal["export"].returncode == 0, rehearsal["export"].stderr
    prompts, _ = _recorded(root)
    (tmp_path / "prompts.json").write_text(json.dumps(prompts), encoding="utf-8")
    base = root / "files" / "models" / "builtin" / "tiny-qwen2"
    res = subprocess.run([str(tools_python), "-c", LOGITS, str(root / "export"), str(adapter_export),
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
