"""Issue 43: ``ftagent eval`` never scores weights it did not load, and a cut weight file is refused first.

* whole files (:mod:`ftagent.models.checkpoint`, the ``safetensors`` package): a cut ``model.safetensors``, a
  shard an index names that is missing — refused by ``eval`` (exit 2, before anything runs; before: a
  ``StepError`` traceback after a 167 s OpenCompass run) and by ``--base-model`` at start-up;
* the weights against ``config.json`` (:mod:`ftagent.tools.opencompass.weights`): a verdict with missing,
  unexpected or mismatched tensors stops every evaluation before OpenCompass runs (a session's candidate:
  a ``StepError`` EVAL; ``eval``: exit 2); the verdict is cached by the files' digest; a check that cannot
  run is a warning. The real check in the tool env: ``tests/integration/test_weights_check.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftagent.core.errors import StepError
from ftagent.models.checkpoint import checkpoint_problems
from ftagent.runners.base import RunResult
from ftagent.tools.opencompass.weights import WeightsVerdict, weights_problem
from tests.helpers.weights import safetensors_bytes

REPO = Path(__file__).resolve().parents[2]


def _model(folder: Path, weights: bytes | None = None) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "qwen2"}')
    (folder / "model.safetensors").write_bytes(weights if weights is not None else safetensors_bytes(b"w" * 64))
    (folder / "tokenizer.json").write_text("{}")
    (folder / "chat_template.jinja").write_text("{{ messages }}")
    return folder


def test_a_cut_file_and_a_missing_shard_are_named(tmp_path):
    whole = safetensors_bytes(b"w" * 64)
    assert checkpoint_problems(_model(tmp_path / "ok")) == []
    (cut,) = checkpoint_problems(_model(tmp_path / "cut", whole[:-10]))
    assert cut.startswith(f"model.safetensors ({len(whole) - 10:,} bytes) is not a whole safetensors file")
    assert "incomplete metadata, file not fully covered" in cut
    sharded = _model(tmp_path / "sharded")
    (sharded / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "a": "model.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    assert checkpoint_problems(sharded) == [
        "model.safetensors.index.json names 1 missing shard(s): model-00002-of-00002.safetensors"]


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FT_", "CHAT_", "OPENAI_"))}
    env.update({"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "FT_FILE_PATH": str(tmp_path / "files"),
                "LOG_PATH": str(tmp_path / "log"), "WORKSPACE_PATH": str(tmp_path / "ws"), "FT_PLANNER": "heuristic"})
    return subprocess.run([sys.executable, "-m", "ftagent", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=180)


def test_eval_refuses_a_cut_model_safetensors_before_anything_runs(tmp_path):
    cut = _model(tmp_path / "cut", safetensors_bytes(b"w" * 64)[:-10])
    proc = _cli(tmp_path, "eval", "--model", str(cut), "--benchmark", "demo_add")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: --model {cut}: the model in {cut} cannot be loaded: "
                                                   "model.safetensors"), proc.stderr
    assert not (tmp_path / "files").exists()  # no benchmark prepared, nothing evaluated


def test_llm_finetune_refuses_a_cut_base_model_at_start(tmp_path):
    cut = _model(tmp_path / "cut", safetensors_bytes(b"w" * 64)[:-10])
    proc = _cli(tmp_path, "llm_finetune", "--benchmark", "demo_add", "--base-model", str(cut), "--loop-n", "1")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "is not a whole safetensors file" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "log").exists() and not (tmp_path / "ws").exists()


class CheckingRunner:
    """The tool env's answer to the weights check, scripted; any OpenCompass run fails the test."""

    name, tools_env = "checking", "/fake/tools"

    def __init__(self, verdict: dict | None, log: str = "") -> None:
        self.verdict, self.log, self.checks = verdict, log, 0

    def run(self, cmd, *, tool, workdir, env=None, mounts=None, gpus=None, timeout=None, log_file=None):
        assert str(cmd[1]).endswith("weights_script.py"), f"nothing but the check may run: {cmd}"
        self.checks += 1
        text = (json.dumps(self.verdict) + "\n") if self.verdict is not None else self.log
        Path(log_file).write_text(text)
        return RunResult(exit_code=0 if self.verdict else 1, duration_s=0.1, log_file=str(log_file))


LLAMA_OVER_QWEN2 = {"architecture": "LlamaForCausalLM", "checkpoint_tensors": 26, "model_tensors": 21, "missing": [],
                    "unexpected": [f"model.layers.{i}.self_attn.{p}_proj.bias" for i in (0, 1) for p in "kqv"],
                    "mismatched": []}


def test_a_misfit_verdict_stops_the_evaluation_and_is_cached(tmp_path):
    from ftagent.benchmarks import get_benchmark
    from ftagent.core.settings import load_settings
    from ftagent.tools.opencompass.runs import evaluate_splits_of_path

    model = _model(tmp_path / "llama_over_qwen2")
    settings = load_settings(file_path=tmp_path / "ft", benchmark_limit=4)
    runner = CheckingRunner(LLAMA_OVER_QWEN2)
    for _ in range(2):
        with pytest.raises(StepError) as err:
            evaluate_splits_of_path(model, None, benchmark=get_benchmark("demo_add"), settings=settings, runner=runner,
                                    work_dir=tmp_path / "work", model_name="builtin/tiny-qwen2")
        assert err.value.error_type.value == "EVAL" and err.value.details == {"weights_misfit": True}
        assert err.value.message.startswith(f"the model was not evaluated: {model}: its weights do not fit its "
                                            "config.json (transformers builds LlamaForCausalLM from it")
        assert ("6 tensor(s) in the checkpoint but not in the model (they would be dropped): "
                "model.layers.0.self_attn.k_proj.bias") in err.value.message and "and 2 more" in err.value.message
    assert runner.checks == 1  # the second evaluation read the cached verdict


def test_a_check_that_cannot_run_is_a_warning_not_a_refusal(tmp_path):
    warnings: list[str] = []
    runner = CheckingRunner(None, log="Traceback …\nValueError: Unrecognized model in /m\n"
                                      + json.dumps({"error": "ValueError: Unrecognized model in /m"}) + "\n")
    got = weights_problem(_model(tmp_path / "m"), None, runner, work_dir=tmp_path / "w", cache_dir=tmp_path / "c",
                          digest="d1", on_warning=warnings.append)
    assert got is None and len(warnings) == 1 and "could not be checked" in warnings[0]
    assert "Unrecognized model" in warnings[0]
    assert not (tmp_path / "c" / "weights" / "d1.json").exists()  # not cached: checked again next time


def test_eval_refuses_a_misfit_with_exit_2(tmp_path, monkeypatch):
    """``ftagent eval``: the evaluation's refusal is bad input (exit 2) naming --model."""
    from ftagent.core.errors import UserInputError
    from ftagent.finetune import score

    for key in [k for k in os.environ if k.startswith("FT_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("FT_FILE_PATH", str(tmp_path / "files"))
    monkeypatch.setenv("FT_BENCHMARK_LIMIT", "4")
    model = _model(tmp_path / "llama_over_qwen2")
    runner = CheckingRunner(LLAMA_OVER_QWEN2)
    with pytest.raises(UserInputError, match=rf"^--model {model}: the model was not evaluated: .*LlamaForCausalLM"):
        score.run_eval(str(model), "demo_add", "test", make_runner=lambda: runner)
    assert runner.checks == 1


def test_the_verdict_names_each_kind_of_misfit():
    verdict = WeightsVerdict(architecture="BertLMHeadModel", model_tensors=44, checkpoint_tensors=26,
                             missing=[f"bert.m{i}" for i in range(6)], unexpected=["model.norm.weight"],
                             mismatched=[["lm_head.weight", [512, 128], [30522, 128]]],
                             adapter_unexpected=["base_model.model.nowhere.lora_A.weight"],
                             adapter_mismatched=[["base_model.model.q.lora_B.weight", [64, 8], [128, 8]]])
    text = verdict.problem()
    assert "6 tensor(s) missing from the checkpoint (they would be newly initialised): bert.m0" in text
    assert "and 2 more" in text and "1 tensor(s) in the checkpoint but not in the model" in text
    assert "lm_head.weight [512, 128] vs [30522, 128]" in text
    assert "1 tensor(s) of the adapter that land on no module of the base (PEFT would drop them)" in text
    assert "base_model.model.q.lora_B.weight [64, 8] vs [128, 8]" in text
    assert WeightsVerdict(architecture="Qwen2ForCausalLM").problem() is None
