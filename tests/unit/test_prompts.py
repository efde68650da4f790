"""Planner prompts: golden files, the facts each prompt must carry, the budget, no test data.

The golden files under ``tests/fixtures/llm/golden/<scenario>/<step>.txt`` are the exact requests
(role headers + content) for demo_add + the tiny model and for chemcotbench on the fixture data.
After an intended prompt change, regenerate and review them:
``UPDATE_GOLDEN=1 pytest tests/unit/test_prompts.py``.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import jinja2
import pytest

from ftagent.benchmarks import get_benchmark
from ftagent.core.errors import ErrorType, StepFailure
from ftagent.core.hardware import GPUInfo, HardwareInfo
from ftagent.core.settings import FTSettings, LLMSettings, PathSettings, Settings
from ftagent.core.trace import Experiment, Trace
from ftagent.core.types import AnswerProfile, EvalResult, Hypothesis, ModelInfo, ScenarioInfo, TimeLimits
from ftagent.datasets.catalogue import build_catalogue
from ftagent.datasets.prepare import prepare_dataset
from ftagent.llm.budget import Section, count_tokens, fit_sections
from ftagent.planners.llm import brief, brief_benchmark, brief_machine, numbers
from ftagent.planners.llm.preview import STEPS, as_text, preview
from ftagent.planners.llm.propose import build_proposal_messages
from ftagent.planners.llm.templates import PROMPTS_DIR, render
from ftagent.planners.llm.view import planner_view
from ftagent.tools.llamafactory.catalogue import read_catalogue
from ftagent.tools.llamafactory.config import managed_keys
from ftagent.tools.llamafactory.memory import ModelSpec, estimate_memory, model_spec
from ftagent.tools.opencompass.inference import eval_decoding

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GOLDEN = FIXTURES / "llm" / "golden"
TEST_SCORE = 0.918273  # planted: must never reach a prompt
BASELINE_TEST = 0.827364


@pytest.fixture(autouse=True)
def _fixed_machine(monkeypatch):
    """The brief reads this machine's CPU and the model folder's size: fix both."""
    monkeypatch.setattr(brief_machine, "cpu_facts", lambda: (2, 24.0))
    monkeypatch.setattr(brief, "dir_size", lambda path: 16_381_470_720 if "Qwen3" in str(path) else 2_312_345)


def _settings(**ft) -> Settings:
    return Settings(FTSettings(**ft), LLMSettings(), PathSettings())


def _catalogue_text(gpu: bool) -> str:
    return read_catalogue(FIXTURES / "llamafactory").format_for_prompt(
        gpu=gpu, managed=[str(k) for k in managed_keys(gpu=gpu)], max_tokens=6000, count=count_tokens)


def _demo_scenario(root: Path) -> ScenarioInfo:
    datasets = root / "datasets"
    prepare_dataset("demo_add", root)
    build_catalogue(datasets, ["demo_add"])
    spec = ModelSpec(name="tiny-qwen2", params=558_208, hidden_size=128, num_layers=2, vocab_size=512,
                     intermediate_size=344, num_heads=4, num_kv_heads=2, max_position_embeddings=512, from_config=True)
    memory = estimate_memory(spec, 24.0, 1, device="cpu")
    model = ModelInfo(name="builtin/tiny-qwen2", path="/models/builtin/tiny-qwen2", architecture="Qwen2ForCausalLM",
                      model_type="qwen2", num_parameters=558_208, parameter_source="safetensors",
                      max_position_embeddings=512, vocab_size=512, hidden_size=128, num_hidden_layers=2,
                      torch_dtype="float32", template="chatml")
    info = ScenarioInfo(
        benchmark="demo_add", core_metric="accuracy", base_model="builtin/tiny-qwen2",
        benchmark_description="Bundled synthetic benchmark: 'What is a + b?' for two-digit integers a and b.",
        base_model_path="/models/builtin/tiny-qwen2", model_info=model, datasets=["demo_add"],
        dataset_root=str(datasets), hardware=HardwareInfo(message="NVML unavailable"),
        memory=memory.model_dump(mode="json"), memory_report=memory.to_markdown(), file_path=str(root),
        workspace_root=str(root / "ws"), upper_data_size_limit=2000,
        time_limits=TimeLimits(full_timeout=3600, data_processing_timeout=1800, benchmark_timeout=604800),
        baseline=EvalResult(benchmark="demo_add", split="validation", core_metric="accuracy", score=62.0),
        parameter_catalogue=_catalogue_text(False),
        eval_decoding=eval_decoding("builtin/tiny-qwen2", 0, get_benchmark("demo_add").spec.max_out_len))
    info.description_text = brief.render_brief(info, benchmark=get_benchmark(info.benchmark))
    return info


def _chem_scenario(root: Path) -> ScenarioInfo:
    datasets = root / "datasets"
    shutil.copytree(FIXTURES / "datasets" / "chemcot", datasets / "chemcot")
    item = json.loads((FIXTURES / "benchmarks" / "chemcotbench" / "mol_und.json").read_text(encoding="utf-8"))[0]
    bench = root / "benchmarks" / "chemcotbench"  # the prepared validation split (the brief shows one item)
    bench.mkdir(parents=True)
    (bench / "validation.jsonl").write_text(json.dumps({"prompt": item["query"], "answer": item["gt"]}) + "\n",
                                            encoding="utf-8")
    build_catalogue(datasets, ["chemcot"])
    gpu = GPUInfo(index=0, name="NVIDIA H200", memory_total_gb=139.8, memory_used_gb=0.5)
    hardware = HardwareInfo(gpus=[gpu], driver_version="570.86", cuda_version="12.8")
    memory = estimate_memory(model_spec("Qwen3-8B"), 139.8 * 1024**3 / 1e9, 1)
    model = ModelInfo(name="Qwen/Qwen3-8B", path="/models/Qwen/Qwen3-8B", architecture="Qwen3ForCausalLM",
                      model_type="qwen3", num_parameters=8_190_735_360, parameter_source="safetensors",
                      max_position_embeddings=40960, vocab_size=151936, hidden_size=4096, num_hidden_layers=36,
                      torch_dtype="bfloat16", template="qwen3", has_think_token=True)
    info = ScenarioInfo(
        benchmark="chemcotbench", core_metric="mean_core", base_model="Qwen/Qwen3-8B",
        base_model_path="/models/Qwen/Qwen3-8B", model_info=model, datasets=["chemcot"], dataset_root=str(datasets),
        hardware=hardware, memory=memory.model_dump(mode="json"), file_path=str(root), workspace_root=str(root / "ws"),
        upper_data_size_limit=1500, force_think_token=True,
        time_limits=TimeLimits(full_timeout=36000, data_processing_timeout=3600, benchmark_timeout=7200),
        baseline=EvalResult(benchmark="chemcotbench", split="validation", core_metric="mean_core", score=31.25),
        parameter_catalogue=_catalogue_text(True),
        eval_decoding=eval_decoding("Qwen/Qwen3-8B", 1, get_benchmark("chemcotbench").spec.max_out_len))
    info.description_text = brief.render_brief(info, benchmark=get_benchmark(info.benchmark))
    return info


def _trace(root: Path, baseline: float, core_metric: str) -> Trace:
    ws = root / "ws" / "loop_0"
    ws.mkdir(parents=True)
    (ws / "process_data.py").write_text("import json\njson.dump([], open('data.json', 'w'))\n", encoding="utf-8")
    (ws / "train.yaml").write_text("finetuning_type: lora\nlearning_rate: 2.0e-4\nwarmup_ratio: 0.05\n", encoding="utf-8")
    loss = [{"step": 5 * i, "loss": round(2.5 * 0.93**i, 4), "lr": 2e-4} for i in range(1, 48)]
    (ws / "logs").mkdir()
    (ws / "logs" / "process_data.log").write_text("read 6000 rows\nkept 2000, dropped 0 (too long), 4000 (cap)\n",
                                                  encoding="utf-8")
    (ws / "output").mkdir()
    (ws / "output" / "trainer_state.json").write_text(json.dumps({"global_step": 250, "log_history": [
        {"step": 250, "epoch": 2.0, "train_runtime": 125.0, "train_samples_per_second": 32.0}]}), encoding="utf-8")
    trace = Trace(core_metric=core_metric, baseline_val=baseline, baseline_test=BASELINE_TEST)
    trace.record(Experiment(
        loop=0, hypothesis=Hypothesis(hypothesis="[Data] all rows in the benchmark's prompt format [Training] LoRA r16",
                                      task="1) data: convert every row 2) training: lora, lr 2e-4, 2 epochs"),
        artefacts={"process_data.py": str(ws / "process_data.py"), "train.yaml": str(ws / "train.yaml"),
                   "workspace": str(ws), "output_dir": str(ws / "output")},
        config={"finetuning_type": "lora", "lora_rank": 16, "learning_rate": 2e-4, "num_train_epochs": 2,
                "warmup_ratio": 0.05, "output_dir": "/ws/loop_0/output", "bf16": False},
        system_changes=["dropped this_key_does_not_exist (unknown to LLaMA-Factory)",
                        "changed bf16: true -> false (system-managed)"],
        data_rows=2000, loss_history=loss, val_score=round(baseline + 20, 4), test_score=TEST_SCORE,
        decision=True, reason="The boxed format was learnt. " + ("The loss kept falling to the end of the run, so a "
                                                                 "longer run can still help. " * 60)
        + "A loss this low can mean the model memorised the pairs.", next_step="Train one more epoch with lr 1e-4."))
    trace.record(Experiment(
        loop=1, parent=0, hypothesis=Hypothesis(hypothesis="[Training] full fine-tuning, batch 64", task="full, bs 64"),
        failure=StepFailure(stage="validate", error_type=ErrorType.OOM, message="micro-batch run failed: out of memory",
                            log_tail="[INFO] loading model\nstep 0\ntorch.OutOfMemoryError: CUDA out of memory. "
                                     "Tried to allocate 2.00 GiB\n[INFO] exiting"),
        reason="Full fine-tuning with batch 64 does not fit.", next_step="Keep LoRA; batch 8."))
    return trace


def _workspace(root: Path) -> Path:
    ws = root / "ws" / "loop_2"
    ws.mkdir(parents=True)
    rows = [{"instruction": f"What is {a} + {a + 1}? Put the final answer in \\boxed{{}}.", "input": "",
             "output": f"\\boxed{{{2 * a + 1}}}"} for a in range(10, 60)]
    (ws / "data.json").write_text(json.dumps(rows), encoding="utf-8")
    return ws


def _previews(scenario: ScenarioInfo, root: Path, settings: Settings) -> dict[str, str]:
    trace = _trace(root, scenario.baseline.score, scenario.core_metric)
    hyp = Hypothesis(hypothesis="[Data] keep the data [Training] LoRA r32, lr 1e-4, 3 epochs",
                     task="1) reuse the data script 2) lora_rank 32", parent=0)
    ws = _workspace(root)
    return {step: as_text(preview(step, scenario, settings, trace, hypothesis=hyp, workspace=ws)) for step in STEPS}


def _check_golden(name: str, texts: dict[str, str]) -> None:
    folder = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        folder.mkdir(parents=True, exist_ok=True)
        for step, text in texts.items():
            (folder / f"{step}.txt").write_text(text, encoding="utf-8")
    for step, text in texts.items():
        expected = (folder / f"{step}.txt").read_text(encoding="utf-8")
        assert text == expected, f"{name}/{step}.txt differs (UPDATE_GOLDEN=1 after review)"


@pytest.fixture()
def demo(tmp_path):
    scenario = _demo_scenario(tmp_path / "demo")
    return scenario, _previews(scenario, tmp_path / "demo", _settings())


@pytest.fixture()
def chem(tmp_path):
    scenario = _chem_scenario(tmp_path / "chem")
    return scenario, _previews(scenario, tmp_path / "chem", _settings(force_think_token=True))


def test_golden_demo_add(demo):
    _check_golden("demo_add_tiny", demo[1])


def test_golden_chemcotbench(chem):
    _check_golden("chemcotbench_qwen3_8b", chem[1])


def test_every_prompt_carries_its_facts(demo):
    _, p = demo
    sample = 'What is '  # a real row of the generated demo_add data
    assert "sample 1: {\"instruction\": \"" + sample in p["data"] and "sample 2:" in p["data"]
    assert "6,000 rows" in p["data"] and "`demo_add_train.json`: 6,000 rows" in p["data"]
    for step in ("propose", "data", "config", "feedback"):
        assert "558K (558,208" in p[step], step  # the parameter count, in words and exactly
        assert "62.0 % accuracy on the validation split" in p[step], step  # the baseline, as a percentage
        assert "accuracy, a percentage, 0–100" in p[step], step  # the metric's scale
        assert "randomly initialised" in p[step] and "knows nothing" in p[step], step  # built-in model
        assert "/models/builtin" not in p[step], step  # no host path: the system sets model_name_or_path
    for step in ("propose", "config"):
        assert "| `lora` | yes | CPU | 5.9 MB | the whole context (512) |" in p[step], step  # a memory table row
        assert "| `full` | yes | CPU | 8.9 MB |" in p[step], step
        assert "gradient checkpointing, the default" not in p[step], step  # relay r2: a row the CPU never runs
        assert "qlora" not in p[step] and "full_gc" not in p[step] and "10.0 MB" not in p[step], step
        assert "CPU only: 2 cores, 24 GiB RAM" in p[step]
    for name in ("learning_rate", "finetuning_type", "lora_rank", "cutoff_len", "per_device_train_batch_size"):
        assert f"- {name} (" in p["config"], name
    assert "0.00B" not in "".join(p.values()) and "1,803,622" not in "".join(p.values())
    # history that teaches: the config trained, the changes, the rows, the loss summary, the failure lines
    prop = p["propose"]
    assert "learning_rate: 0.0002" in prop and "dropped this_key_does_not_exist" in prop
    assert "2,000 rows produced" in prop and "47 points, first 2.325" in prop and "| step | loss | lr |" in prop
    assert "torch.OutOfMemoryError: CUDA out of memory" in prop and "Suggested next step: Keep LoRA" in prop
    assert "- 50 rows written by the data script's debug run" in p["config"]  # the data the config is for
    assert "What the system changed in the parent's train.yaml" in p["config"]
    for step in ("propose", "data", "config"):  # how evaluation generates: the model's cap, greedy on CPU
        assert "at most 16 new tokens per answer" in p[step], step  # the benchmark caps below the model
        assert "greedy decoding (temperature 0); prompt and answer together within 512 tokens" in p[step], step


def test_answer_limit_is_the_smaller_cap():
    """The model's own max_out_len caps a benchmark's (tiny-qwen2: 32 < tablebench's 4,096)."""
    decoding = eval_decoding("builtin/tiny-qwen2", 0, 4096)
    assert decoding.max_out_len == 32 and not decoding.sampling
    # a thinking model keeps its own, longer cap (tests/unit/test_answer_caps.py)
    assert eval_decoding("Qwen/Qwen3-8B", 1, 1024).sampling and eval_decoding("Qwen/Qwen3-8B", 0, 1024).max_out_len == 38912
    assert "greedy" in brief_benchmark.decoding_words(decoding) and brief_benchmark.decoding_words(None) == ""


def test_per_item_prompts_show_one_validation_item(chem):
    """A benchmark that builds each prompt shows a real validation prompt, not its internal note."""
    _, p = chem
    for step in ("propose", "data", "config"):
        assert "How many hydroxyl groups are in OCCO? Answer as JSON" in p[step], step
        assert "Reference answer: `2`" in p[step] and "prebuilt per item" not in p[step], step


def test_no_test_score_anywhere(demo, chem):
    for _, texts in (demo, chem):
        blob = "".join(texts.values())
        assert str(TEST_SCORE) not in blob and str(BASELINE_TEST) not in blob


def test_force_think_token_reaches_data_config_and_feedback(chem):
    scenario, p = chem
    assert "`<think>reasoning</think>answer`" in p["data"]
    assert "enable_thinking: true" in p["config"]
    assert "<think>reasoning</think>answer" in p["feedback"]
    assert "1 × NVIDIA H200 (140 GiB each)" in p["propose"] and "8.2B (8,190,735,360" in p["propose"]
    assert "- deepspeed (" not in p["config"]  # the system sets it from the memory plan, and says so
    assert "The system sets `deepspeed`" in p["config"]
    assert "yes: the tokenizer has a `<think>` token" in p["propose"]


def test_every_prompt_is_under_budget(demo, chem):
    for _, texts in (demo, chem):
        for step, text in texts.items():
            tokens = int(text.split(": ", 1)[1].split(" tokens", 1)[0].replace(",", ""))
            assert 0 < tokens <= 24_000, step


def test_a_small_budget_drops_whole_sections_least_useful_first(tmp_path):
    scenario = _demo_scenario(tmp_path)
    trace = _trace(tmp_path, 62.0, "accuracy")
    full = build_proposal_messages(scenario, planner_view(trace), _settings())[1]["content"]
    small = build_proposal_messages(scenario, planner_view(trace), _settings(prompt_token_budget=2000))[1]["content"]
    assert count_tokens(small) < count_tokens(full)
    assert "Left out to fit the prompt budget:" in small and "## Objective" in small and "# Results so far" in small
    dropped = small.rsplit("Left out to fit the prompt budget: ", 1)[1]
    assert dropped.startswith("Earlier experiments") or dropped.startswith("process_data.py")  # lowest priority first
    for line in small.splitlines():  # never cut mid-section: every kept line is a line of the full prompt
        assert line in full or line.startswith("(Left out"), line


def test_fit_sections_keeps_required_and_order():
    sections = [Section(key="a", title="A", body="x " * 50, required=True),
                Section(key="b", title="B", body="y " * 400, priority=10),
                Section(key="c", title="C", body="z " * 50, priority=90)]
    fitted = fit_sections(sections, budget=200)
    assert fitted.dropped == ["B"] and fitted.text.index("# A") < fitted.text.index("# C")
    assert fitted.tokens <= 200
    tight = fit_sections(sections, budget=10)
    assert "# A" in tight.text and tight.over_budget  # required sections stay even when over budget


def test_templates_render_with_strict_undefined():
    names = sorted(p.stem for p in PROMPTS_DIR.glob("*.j2"))
    assert names == ["config_coder", "data_coder", "dataset_selection", "feedback_error", "feedback_success", "proposal_system",
                     "proposal_user", "scenario_brief"]
    with pytest.raises(jinja2.UndefinedError):
        render("proposal_system")  # has_parent and upper_data_size_limit missing


def test_brief_formatting():
    assert numbers.format_count(558_208) == "558K" and numbers.format_count(8_190_735_360) == "8.2B"
    assert numbers.format_count(494_032_768) == "494M" and brief.format_duration(5400) == "1 h 30 min"
    assert brief.format_duration(604800) == "7 days" and brief.format_duration(45) == "45 s"
    assert numbers.format_gb(0.0004) == "400.0 KB" and numbers.format_bytes(2_312_345) == "2.3 MB"
    sections = brief.brief_sections("## A\none\n## B\ntwo\nthree\n")
    assert sections == {"A": "one", "B": "two\nthree"}


def test_fallback_shortens_before_dropping():
    sections = [Section(key="a", title="A", body="x " * 50, required=True),
                Section(key="d", title="D", body="full " * 500, fallback="short form", priority=80),
                Section(key="c", title="C", body="z " * 300, priority=10)]
    fitted = fit_sections(sections, budget=200)
    assert "short form" in fitted.text and "full full" not in fitted.text and fitted.dropped == ["C"]
    assert "shortened to fit the prompt budget: D" in fitted.text and fitted.tokens <= 200
    gone = fit_sections(sections, budget=80)
    assert "short form" not in gone.text and set(gone.dropped) == {"C", "D"}


def test_data_prompt_keeps_a_dataset_summary_when_the_full_entry_does_not_fit(tmp_path):
    from types import SimpleNamespace

    from ftagent.planners.llm.code_messages import data_messages

    scenario = _demo_scenario(tmp_path)
    hyp = Hypothesis(hypothesis="h", task="t")
    from ftagent.datasets.contamination import rule_words
    from ftagent.planners.llm.brief import MODEL
    from ftagent.planners.llm.prompting import brief_part

    # the brief's contamination check and base model (the context window the script drops long rows by) are
    # required in the data prompt (issue 43: said there, not again in the script's rules)
    budget = 1220 + count_tokens(rule_words()) + count_tokens(brief_part(scenario, MODEL).body)
    tight = SimpleNamespace(ft=SimpleNamespace(prompt_token_budget=budget, force_think_token=False))
    text = data_messages(scenario, tight, hyp)[0]["content"]
    full = data_messages(scenario, _settings(), hyp)[0]["content"]
    assert "### Files" in full and "### Files" not in text
    assert "## Dataset `demo_add`" in text and "sample 1:" in text and count_tokens(text) <= budget
    assert "shortened to fit the prompt budget" in text


def test_time_left_and_loops_left():
    from types import SimpleNamespace as NS

    from ftagent.planners.llm.prompting import time_left

    ctx = NS(time_left=lambda: 5400.0, loop=NS(index=1), state=NS(config={"run": {"loop_n": 3}}))
    assert time_left(ctx) == ("- time left in this session: 1 h 30 min\n"
                              "- this is loop 1 (numbered from 0); 1 more loop(s) after it\n"
                              "- so about 45 min per loop, this one included, for data processing, training and "
                              "evaluation together: plan the training to fit in that (the per-run limits above are "
                              "ceilings, not targets)")
    last = NS(time_left=lambda: None, loop=NS(index=2), state=NS(config={"run": {"loop_n": 3}}))
    assert time_left(last) == ("- no session time limit (no --timeout): only the number of loops ends the session\n"
                               "- this is loop 2 (numbered from 0); it is the last loop")
    assert time_left(None) == ""
    done = time_left(ctx, finished=True)  # the feedback's view: loop 1 is over, one loop follows
    assert done.startswith("- time left in this session: 1 h 30 min\n- loop 1 (numbered from 0) has just finished; "
                           "1 more loop(s) follow\n- so about 1 h 30 min for each of them")
    assert "so about" not in time_left(last, finished=True) and "it was the last loop" in time_left(last, finished=True)


def test_relay_critique_facts(demo):
    """What an LLM playing the planner found missing or confusing (issue 13 relay), now in the prompts."""
    _, p = demo
    prop, feedback = p["propose"], p["feedback"]
    # SOTA rule with its threshold, in the proposal and the feedback prompt
    assert "by more than FT_SOTA_MIN_DELTA = 0" in prop and "keeps the current best" in prop
    # issue 31: the interval rule (FT_SOTA_RULE default) in the words the planner reads
    assert "lower bound of the 95 % paired bootstrap interval" in prop and "not a significant gain" in prop
    assert "type OOM" in feedback  # the preview's feedback is of the failed loop: no rule needed there
    # measured throughput and the data script's own summary in the history
    assert "Training speed (measured): 250 optimizer steps in 2 min 5 s, 0.50 s/step, 32.0 samples/s" in prop
    assert "kept 2000, dropped 0 (too long), 4000 (cap)" in prop
    # feedback clipped at a sentence end, never mid-word
    assert "can still help. …" in prop and "memorised" not in prop  # cut after a sentence, marked
    # counts say what they count
    assert "Experiments finished so far (failed ones included; loops still running are not counted): 2 (loops 0, 1) — 1 with a validation score, 1 failed" in prop
    assert "1 of the 2 experiment(s) above started from it" in prop and "1 experiment(s), the latest" not in prop
    assert "not measured yet" not in prop  # a run has finished: its speed is shown instead
    # scores as percentages, consistently
    assert "validation accuracy 82.0 % (baseline 62.0 %, +20)" in prop and "Current best: loop 0, validation accuracy 82.0 %" in prop
    # README agrees with the rows (the suffix)
    assert 'What is a + b? Put the final answer in \\\\boxed{}.' in p["data"] and "every row carries the same suffix" in p["data"]
    # noise: no evaluation time limit; parameter catalogue without RLHF/profiler arguments
    assert "one benchmark evaluation" not in prop and "- one training run: at most 1 h" in prop
    assert "- learning_rate (" in p["config"]
    for name in ("ref_model", "reward_model", "use_hyper_parallel", "pref_beta", "ppo_"):
        assert f"- {name}" not in p["config"], name


def test_llm_rules_only_with_model_pools(tmp_path):
    from ftagent.planners.llm.code_messages import data_messages

    scenario = _demo_scenario(tmp_path)
    hyp = Hypothesis(hypothesis="h", task="t")
    with_pools = data_messages(scenario, _settings(), hyp)[0]["content"]
    without = data_messages(scenario, _settings(strong_models=[], weak_models=[]), hyp)[0]["content"]
    assert "STRONG_MODEL_POOL" in with_pools and "openai.OpenAI(" in with_pools
    assert "STRONG_MODEL_POOL" not in without and "No LLM is available to this script" in without
    system = build_proposal_messages(scenario, planner_view(Trace(core_metric="accuracy")),
                                     _settings(strong_models=[], weak_models=[]))[0]["content"]
    assert "strong LLM" not in system and "no LLM is available to data scripts" in system


def test_internal_error_is_labelled_and_not_blamed_on_the_plan(tmp_path):
    from ftagent.planners.llm.feedback import feedback_messages

    scenario = _demo_scenario(tmp_path)
    trace = Trace(core_metric="accuracy", baseline_val=0.0)
    tb = ('Traceback (most recent call last):\n  File "/work/main/ftagent/planners/llm/prompts/config_coder.j2", '
          "line 10, in top-level template code\njinja2.exceptions.UndefinedError: 'cpu' is undefined")
    exp = Experiment(loop=0, hypothesis=Hypothesis(hypothesis="15 epochs", task="t"),
                     failure=StepFailure(stage="code", error_type=ErrorType.UNKNOWN, message="'cpu' is undefined",
                                         log_tail=tb))
    trace.record(exp)
    prop = build_proposal_messages(scenario, planner_view(trace), _settings())[1]["content"]
    assert "an internal error of the system (not caused by the plan); retrying the same plan is reasonable" in prop
    assert "do not repeat what" not in prop and "1 stopped by an internal error of the system" in prop
    fb = feedback_messages(scenario, _settings(), exp, trace, False)[0]["content"]
    assert "internal error of the system" in fb and "advise how to avoid the failure" not in fb
    assert "## Hardware" not in fb and "## Budgets" not in fb  # nothing the plan can change
    plan_bug = exp.model_copy(update={"failure": exp.failure.model_copy(update={
        "log_tail": 'File "/ws/loop_0/process_data.py", line 3\nKeyError: x'})})
    assert "internal error" not in feedback_messages(scenario, _settings(), plan_bug, trace, False)[0]["content"]


def test_saturated_metric_and_validation_size(tmp_path):
    from ftagent.planners.llm.feedback import feedback_messages

    scenario = _demo_scenario(tmp_path)
    bench = Path(scenario.file_path) / "benchmarks" / "demo_add"
    bench.mkdir(parents=True)
    (bench / "validation.jsonl").write_text("{}\n" * 100, encoding="utf-8")
    (bench / "test.jsonl").write_text("{}\n" * 77, encoding="utf-8")
    text = brief.render_brief(scenario, benchmark=get_benchmark(scenario.benchmark))
    assert "validation split of 100 items" in text and "77" not in text
    trace = Trace(core_metric="accuracy", baseline_val=0.0)
    exp = Experiment(loop=0, hypothesis=Hypothesis(hypothesis="h", task="t"), val_score=100.0, decision=True)
    trace.record(exp)
    trace.sota_loop = 0
    prop = build_proposal_messages(scenario, planner_view(trace), _settings(sota_min_delta=0.5))[0]["content"]
    assert "FT_SOTA_MIN_DELTA = 0.5" in prop and "already scores 100.0 %, the metric's maximum" in prop
    fb = feedback_messages(scenario, _settings(), exp, trace, True)[0]["content"]
    assert "This experiment scores the metric's maximum" in fb and "- This experiment: 100.0 %" in fb
    assert "by more than FT_SOTA_MIN_DELTA = 0" in fb and "keeps the current best" in fb
    assert "- Why: Validation accuracy 100 beats the baseline (0)" in fb  # the rule's own line (no items: delta)


def test_chat_template_overhead(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    from ftagent.planners.llm.chat_overhead import template_overhead

    vocab = {c: i for i, c in enumerate(["[UNK]", "What", "is", "12", "+", "34", "?", "46", "user", "assistant"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(["<|im_start|>", "<|im_end|>"])
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "chat_template.jinja").write_text(
        "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>' + '\\n' }}"
        "{% endfor %}", encoding="utf-8")
    over = template_overhead(tmp_path)
    assert over is not None and over.tokens == 6 and over.atomic  # 2 × (start, role, end)
    assert over.special_tokens == ["<|im_start|>", "<|im_end|>"] and "adds 6 tokens" in over.line()
    assert template_overhead(tmp_path / "missing") is None


def test_history_clips_at_sentence_or_word_boundaries():
    from ftagent.planners.llm.history import clip_text

    text = "First sentence here. Second one is longer and keeps going without any stop at all"
    assert clip_text(text, 35) == "First sentence here. …"
    assert clip_text(text, 60) == "First sentence here. Second one is longer and keeps going …"
    assert clip_text("word " * 40, 50).endswith("word …") and clip_text("short", 50) == "short"


def test_catalogue_reads_ftagent_notes_fresh(tmp_path):
    """A dataset prepared before its notes changed still shows the current notes (never stale facts)."""
    folder = tmp_path / "demo_add"
    folder.mkdir()
    (folder / "FTAGENT_NOTES.md").write_text('rows {"instruction": "What is a + b?"} (stale)', encoding="utf-8")
    (folder / "demo_add_train.json").write_text(json.dumps([{"instruction": "q", "input": "", "output": "a"}]),
                                                encoding="utf-8")
    entry = build_catalogue(tmp_path, ["demo_add"])["demo_add"]
    assert "(stale)" not in entry.readme and "every row carries the same suffix" in entry.readme


def test_score_format_and_domain_metric(chem):
    assert numbers.format_score(62.0, "accuracy") == "62.0 %" and numbers.format_score(31.25, "mean_core") == "31.25 %"
    assert numbers.format_score(0.5, "kendall_tau") == "0.5" and numbers.format_score(None, "accuracy") == "not yet measured"
    _, p = chem
    assert "mean_core, a percentage, 0–100, the plain mean of the sub-tasks' core metrics" in p["propose"]
    assert "31.25 % mean_core on the validation split" in p["propose"]
    assert "Weights: pretrained" in p["propose"] and "| `lora` + `quantization_bit: 4` | yes | 1 GPU |" in p["propose"]


def test_a_converged_cosine_run_is_levelling_off_not_still_falling():
    """Play-the-LLM finding: a flat tail (0.0016 → 0.0015) under a decaying lr was called "still falling"."""
    from ftagent.planners.llm.loss_words import loss_summary

    curve = [3.7, 1.2, 0.4, 0.1, 0.03, 0.01, 0.004, 0.0025, 0.0018, 0.0016, 0.0016, 0.0015, 0.0015, 0.0015, 0.0015]
    converged = loss_summary([{"step": i, "loss": v} for i, v in enumerate(curve)])
    assert "levelling off" in converged.trend and "still falling" not in converged.trend
    falling = loss_summary([{"step": i, "loss": 4.0 - 0.25 * i} for i in range(15)])
    assert "still falling" in falling.trend
    # the tablebench play: 1.5 → 0.0226 → 0.0169 over the last fifth (lr → 0) is still falling
    tail = [1.5, 0.4, 0.12, 0.06, 0.045, 0.038, 0.033, 0.029, 0.027, 0.0255, 0.024, 0.0226, 0.0205, 0.0186, 0.0169]
    assert "still falling" in loss_summary([{"step": i, "loss": v} for i, v in enumerate(tail)]).trend


def test_a_run_that_stopped_learning_early_is_called_flat():
    """Play-the-LLM finding (tablebench): 0.0617 at step 452 and 0.058 at step 3,729 was "falling, levelling
    off": the run had learnt the format in its first tenth and nothing after (always answering "No")."""
    from ftagent.planners.llm.loss_words import loss_summary

    curve = [(10, 1.53), (226, 0.0925), (452, 0.0617)] + [(452 + 113 * i, 0.0586 - 0.0001 * (i % 3)) for i in range(1, 30)]
    early = loss_summary([{"step": s, "loss": v} for s, v in curve])
    assert early.trend.startswith("fell early, then flat from step 452") and "more steps alone will not help" in early.trend


def test_previous_config_is_shown_without_system_keys():
    """A repair round or a child loop sees the planner's keys, not the host paths the system injected."""
    from ftagent.planners.llm.code_context import without_system_keys

    validated = ("model_name_or_path: /tmp/x/models/builtin/tiny-qwen2\noutput_dir: /tmp/ws/loop_0/output\n"
                 "dataset: ftagent_data\nstage: sft\nlearning_rate: 0.001\nnum_train_epochs: 30\n")
    shown = without_system_keys(validated)
    assert "/tmp/" not in shown and "stage" not in shown and "learning_rate: 0.001" in shown
    assert without_system_keys("not: [valid") == "not: [valid" and without_system_keys("") == ""


def test_earlier_experiments_mark_the_best_lineage(tmp_path):
    """Loop 0, the parent of the best (loop 1), is named as its ancestor, not as another starting point."""
    scenario = _demo_scenario(tmp_path)
    trace = Trace(core_metric="accuracy", direction="max", baseline_val=0.0)
    for loop, parent, score in ((0, None, 14.0), (1, 0, 34.0), (2, 1, 30.0)):
        trace.record(Experiment(loop=loop, parent=parent, val_score=score,
                                hypothesis=Hypothesis(hypothesis=f"h{loop}", task="t")))
    trace.sota_loop = 1
    text = build_proposal_messages(scenario, planner_view(trace), _settings())[1]["content"]
    earlier = text.split("## Earlier experiments (the best's ancestors and other branches)", 1)[1]
    assert earlier.lstrip().startswith("(an ancestor of the current best)") and "h0" in earlier


def test_feedback_shows_the_answer_profile():
    """Play-the-LLM finding (tablebench): "always No" had to be guessed from 10 error samples."""
    from ftagent.planners.llm.feedback import answer_profile
    from ftagent.planners.llm.view import PlannerExperiment

    exp = PlannerExperiment(loop=0, val_score=60.0,
                            val_answers=AnswerProfile(items=40, wrong=16, top={"Final Answer: No": 40}))
    text = answer_profile(exp)
    assert "16 of the 40 validation items were scored wrong" in text
    assert '"Final Answer: No" × 40' in text and "collapsed to one output" in text
    assert answer_profile(PlannerExperiment(loop=1)) == ""


def test_coder_sees_the_latest_experiments_files(tmp_path):
    """The tablebench play: the task said "use loop 1's parser" but only the best's (loop 0) script was shown."""
    from ftagent.planners.llm.code_context import latest_other, latest_part

    trace = Trace(core_metric="accuracy", direction="max", baseline_val=0.0)
    for loop, score in ((0, 60.0), (1, 57.5)):
        ws = tmp_path / f"loop_{loop}"
        ws.mkdir()
        (ws / "process_data.py").write_text(f"print('parser of loop {loop}')\n", encoding="utf-8")
        (ws / "train.yaml").write_text(f"output_dir: /tmp/x\nnum_train_epochs: {30 - 18 * loop}\n", encoding="utf-8")
        trace.record(Experiment(loop=loop, parent=None if loop == 0 else 0, val_score=score,
                                artefacts={"workspace": str(ws), "process_data.py": str(ws / "process_data.py"),
                                           "train.yaml": str(ws / "train.yaml")}))
    view = planner_view(trace)
    latest = latest_other(view, view.get(0))
    assert latest is not None and latest.loop == 1 and latest_other(view, view.get(1)) is None
    script = latest_part(latest, "process_data.py", "python")
    assert "parser of loop 1" in script.body and "latest experiment, validation 57.5" in script.title
    config = latest_part(latest, "train.yaml", "yaml")
    assert "num_train_epochs: 12" in config.body and "/tmp/x" not in config.body


def test_a_long_next_step_reaches_the_proposal_whole(tmp_path):
    """The tablebench play: the feedback's next step was cut at 1,000 characters, losing its training half."""
    scenario = _demo_scenario(tmp_path)
    trace = Trace(core_metric="accuracy", direction="max", baseline_val=0.0)
    advice = "Change the target to a code-built lookup line. " * 25 + "Then train 12 epochs at lr 1e-3 to fit the time."
    trace.record(Experiment(loop=0, val_score=60.0, next_step=advice, hypothesis=Hypothesis(hypothesis="h", task="t")))
    trace.sota_loop = 0
    text = build_proposal_messages(scenario, planner_view(trace), _settings())[1]["content"]
    assert len(advice) > 1000 and "Then train 12 epochs at lr 1e-3 to fit the time." in text
