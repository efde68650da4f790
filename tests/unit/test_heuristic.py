"""The offline heuristic planner's policy, decision by decision."""

from __future__ import annotations

import ast

import pytest
import yaml

from ftagent.core.errors import ErrorType, StepFailure
from ftagent.core.trace import Experiment, Trace
from ftagent.core.types import ModelInfo, ScenarioInfo
from ftagent.planners.heuristic.planner import HeuristicCoder, HeuristicFeedback, HeuristicProposer
from ftagent.planners.heuristic.policy import base_recipe, loss_trend, next_recipe


def scenario(params=558_208, full_fits=True, **kw) -> ScenarioInfo:
    return ScenarioInfo(benchmark="demo_add", base_model="builtin/tiny-qwen2", base_model_path="/m",
                        file_path="/f", workspace_root="/w", datasets=["demo_add"], core_metric="accuracy",
                        model_info=ModelInfo(name="builtin/tiny-qwen2", path="/m", num_parameters=params,
                                             template="chatml"),
                        memory={"methods": [{"method": "full", "fits": full_fits}]}, **kw)


def curve(values):
    return [{"step": i * 10, "loss": v} for i, v in enumerate(values)]


FALLING = curve([5, 2, 1, 0.8, 0.6, 0.45, 0.3, 0.2, 0.12, 0.07])
PLATEAU_HIGH = curve([5, 4.5, 4.2, 4, 4, 3.9, 3.9, 3.9, 3.9, 3.9])
MODERATE = curve([5, 1, 0.6, 0.5, 0.45, 0.42, 0.41, 0.40, 0.40, 0.40])
MEMORISED = curve([5, 1, 0.3, 0.1, 0.05, 0.02, 0.01, 0.01, 0.01, 0.01])


def exp(loop, recipe, history, score, failure=None, decision=False):
    return Experiment(loop=loop, val_score=None if failure else score, failure=failure, decision=decision,
                      plan={"recipe": recipe}, loss_history=history,
                      artefacts={"workspace": f"/w/loop_{loop}"})


def test_loss_trend():
    assert loss_trend(FALLING) == "falling"
    assert loss_trend(PLATEAU_HIGH) == "plateau_high"
    assert loss_trend(MODERATE) == "converged"
    assert loss_trend(curve([1, 2])) == "unknown"


def test_first_recipe_depends_on_model_size_and_memory():
    tiny = base_recipe(scenario())
    assert tiny["finetuning_type"] == "full" and tiny["learning_rate"] == 1e-3 and tiny["max_steps"] == 300
    big = base_recipe(scenario(params=7_000_000_000, full_fits=False))
    assert big["finetuning_type"] == "lora" and big["num_train_epochs"] == 1.0 and big["lora_rank"] == 16


@pytest.mark.parametrize("history,expect_steps,expect_lr", [
    (FALLING, 600, 1e-3),  # under-trained: 2x steps
    (PLATEAU_HIGH, 300, 5e-4),  # stalled high: halve lr
    (MODERATE, 600, 1e-3),  # plateau at moderate loss, no gain: 2x steps
])
def test_policy_after_a_success(history, expect_steps, expect_lr):
    r0 = base_recipe(scenario())
    last = exp(0, r0, history, 5.0)  # a non-zero score (zero with a low loss is a format problem)
    recipe, reason, hypothesis = next_recipe(last, None, last, scenario())
    assert (recipe["max_steps"], recipe["learning_rate"]) == (expect_steps, expect_lr)
    assert reason and hypothesis


def test_memorisation_switches_to_lora():
    r0 = base_recipe(scenario())
    last = exp(0, r0, MEMORISED, 5.0)  # a score, not better (a zero score is a format problem)
    recipe, _, _ = next_recipe(last, None, last, scenario())
    assert recipe["finetuning_type"] == "lora"


LOW = curve([5, 1, 0.3, 0.1, 0.08, 0.07, 0.07, 0.07, 0.07, 0.07])


def test_new_best_trains_longer():
    r0 = base_recipe(scenario())
    best = exp(0, r0, MODERATE, 0.5, decision=True)
    assert next_recipe(best, best, best, scenario())[0]["max_steps"] == 600  # plateau: 2x
    best = exp(0, r0, LOW, 0.5, decision=True)
    assert next_recipe(best, best, best, scenario())[0]["max_steps"] == 450  # fitted + better: 1.5x


def test_failures_oom_timeout_and_others():
    r0 = base_recipe(scenario())
    oom = exp(0, r0, [], None, StepFailure(stage="train", error_type=ErrorType.OOM, message="oom"))
    recipe, _, _ = next_recipe(None, None, oom, scenario())
    assert recipe["finetuning_type"] == "lora" and recipe["per_device_train_batch_size"] == 16
    timeout = exp(0, r0, [], None, StepFailure(stage="train", error_type=ErrorType.TIMEOUT, message="slow"))
    assert next_recipe(None, None, timeout, scenario())[0]["max_steps"] == 150
    bad = exp(0, r0, [], None, StepFailure(stage="validate", error_type=ErrorType.CONFIG, message="bad"))
    assert next_recipe(None, None, bad, scenario())[0]["learning_rate"] == 5e-4


def test_proposer_reuses_parent_data_and_names_itself():
    trace = Trace(baseline_val=0.0)
    h0 = HeuristicProposer(scenario()).propose(trace, None)
    assert h0.planner == "heuristic" and h0.parent is None and not h0.skip_data_processing
    trace.record(exp(0, h0.plan["recipe"], FALLING, 0.3, decision=True))
    h1 = HeuristicProposer(scenario()).propose(trace, None)
    assert h1.parent == 0 and h1.skip_data_processing and h1.plan["recipe"]["max_steps"] == 600


def test_coder_writes_runnable_files(tmp_path):
    sc = scenario()
    h = HeuristicProposer(sc).propose(Trace(), None)
    result = HeuristicCoder(sc).code(h, Trace(), tmp_path, None, None)
    script = (tmp_path / "process_data.py").read_text()
    ast.parse(script)
    assert "ftagent" not in script.replace("Generated by ftagent", "")  # self-contained
    cfg = yaml.safe_load((tmp_path / "train.yaml").read_text())
    assert cfg["template"] == "chatml" and cfg["finetuning_type"] == "full" and cfg["max_steps"] == 300
    assert set(result.files) == {"process_data.py", "train.yaml"}
    failure = StepFailure(stage="validate", error_type=ErrorType.OOM, message="oom")
    HeuristicCoder(sc).code(h, Trace(), tmp_path, failure, None)
    cfg = yaml.safe_load((tmp_path / "train.yaml").read_text())
    assert cfg["per_device_train_batch_size"] == 16 and cfg["cutoff_len"] == 32


def test_generated_script_produces_alpaca_data(tmp_path, monkeypatch):
    import json
    import subprocess
    import sys

    from ftagent.datasets.demo_add import generate

    data_root = tmp_path / "datasets"
    generate(data_root / "demo_add")
    sc = scenario()
    ws = tmp_path / "ws"
    ws.mkdir()
    HeuristicCoder(sc).code(HeuristicProposer(sc).propose(Trace(), None), Trace(), ws, None, None)
    env = {"FT_DATASETS_DIR": str(data_root), "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "process_data.py", "--debug"], cwd=ws, env=env, check=True,
                   capture_output=True)
    rows = json.loads((ws / "data.json").read_text())
    assert len(rows) == 100 and all(r["instruction"].startswith("What is") for r in rows)


def test_feedback_explains_numbers():
    trace = Trace(baseline_val=10.0, core_metric="accuracy")
    fb = HeuristicFeedback(scenario()).feedback(exp(0, {}, FALLING, 40.0), trace, None)
    assert fb.decision and "+30.0" in fb.reason and "train longer" in fb.next_step
    assert "No interval (per-item scores missing), so the delta rule decides. New best." in fb.reason  # issue 31
    failed = exp(1, {}, [], None, StepFailure(stage="train", error_type=ErrorType.OOM, message="oom"))
    fb = HeuristicFeedback(scenario()).feedback(failed, trace, None)
    assert not fb.decision and fb.error_type == "OOM"
