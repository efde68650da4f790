"""Validation and test in one OpenCompass run (issue 16): split naming, per-split cache, retries,
the baseline's one clear error. A fake ``opencompass`` runner writes what OpenCompass 0.5.4 writes."""

from __future__ import annotations

import ast
import csv
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from ftagent.benchmarks import get_benchmark
from ftagent.core.errors import EnvironmentFailure, ErrorType, StepError
from ftagent.core.settings import load_settings
from ftagent.runners.base import RunResult
from ftagent.tools.opencompass import parse
from ftagent.tools.opencompass.evaluator import (
    BaselineEvaluationError,
    evaluate_baseline,
    evaluate_model_path,
)
from ftagent.tools.opencompass.inference import inference_settings
from ftagent.tools.opencompass.runs import evaluate_splits_of_path
from tests.helpers.weights import answer_weights_check, safetensors_bytes

MODEL_ABBR = "ft-demo_add"
SCORES = {"validation": 50.0, "test": 25.0}


class FakeOpenCompass:
    """Writes results, predictions, a summary csv and the log lines OpenCompass prints."""

    name = "fake-oc"
    tools_env = "/fake/tools"

    def __init__(self, fail=lambda abbrs: False, timed_out: bool = False, crash: Exception | None = None) -> None:
        self.fail, self.timed_out, self.crash = fail, timed_out, crash
        self.runs: list[list[str]] = []
        self.configs: list[str] = []
        self.weight_checks = 0

    def run(self, cmd, *, tool, workdir, env=None, mounts=None, gpus=None, timeout=None, log_file=None):
        checked = answer_weights_check(cmd, log_file)  # ftagent's weights check before any run (issue 43)
        if checked is not None:
            self.weight_checks += 1
            return checked
        if self.crash is not None:
            raise self.crash
        assert cmd[0] == "opencompass" and tool == "eval"
        cfg = Path(cmd[1]).read_text(encoding="utf-8")
        self.configs.append(cfg)
        abbrs = [ast.literal_eval(a) for a in re.findall(r"abbr=('[^']*'),\n\s*type=CustomDataset", cfg)]
        label = re.search(r"split='([^']*)'", cfg).group(1)
        self.runs.append(abbrs)
        run = Path(cmd[3]) / f"20260101_0000{len(self.runs):02d}"
        (run / "summary").mkdir(parents=True)
        lines = [f"- OpenCompass - INFO - Current exp folder: {run}"]
        if self.timed_out or self.fail(abbrs):
            lines += ["Traceback (most recent call last):", "RuntimeError: boom in " + ",".join(abbrs)]
            self._log(log_file, lines)
            return RunResult(exit_code=None if self.timed_out else 1, duration_s=1.0, timed_out=self.timed_out,
                             log_tail="\n".join(lines))
        rows = []
        for abbr in abbrs:
            split = abbr.rsplit("@", 1)[1] if "@" in abbr else label
            for sub in ("predictions", "results"):
                (run / sub / MODEL_ABBR).mkdir(parents=True, exist_ok=True)
            preds = {"0": {"origin_prompt": f"q0 {split}", "prediction": "\\boxed{1}", "gold": "1"},
                     "1": {"origin_prompt": f"q1 {split}", "prediction": "\\boxed{7}", "gold": "2"}}
            (run / "predictions" / MODEL_ABBR / f"{abbr}.json").write_text(json.dumps(preds))
            details = [{"pred": "1", "answer": "1", "correct": True}, {"pred": "7", "answer": "2", "correct": False}]
            (run / "results" / MODEL_ABBR / f"{abbr}.json").write_text(
                json.dumps({"accuracy": SCORES[split], "details": details}))
            rows.append({"dataset": abbr, "version": "abc", "metric": "accuracy", "mode": "gen",
                         MODEL_ABBR: f"{SCORES[split]:.2f}"})
            lines += [f"- OpenCompass - INFO - Start inferencing [{MODEL_ABBR}/{abbr}]",
                      "  0%|          | 0/1 [00:00<?, ?it/s]", "100%|##########| 1/1 [00:00<00:00]"]
        lines += ["- OpenCompass - INFO - Running 0-th replica of evaluation"] * len(abbrs)
        with (run / "summary" / "summary_20260101.csv").open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        lines.append(f"- OpenCompass - INFO - write summary to {run}/summary/summary_20260101.txt")
        self._log(log_file, lines)
        return RunResult(exit_code=0, duration_s=1.0, log_tail="\n".join(lines))

    @staticmethod
    def _log(log_file, lines):
        if log_file is not None:
            with open(log_file, "a", encoding="utf-8") as fh:
                fh.write("\n".join(lines) + "\n")


@pytest.fixture()
def model(tmp_path) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(safetensors_bytes(b"weights"))
    (folder / "chat_template.jinja").write_text("{{ messages }}")
    return folder


def _eval(model, tmp_path, runner, splits=("validation", "test"), **kw):
    settings = load_settings(file_path=tmp_path / "ft", benchmark_limit=4)
    return evaluate_splits_of_path(model, None, benchmark=get_benchmark("demo_add"), splits=splits, settings=settings,
                                   runner=runner, work_dir=tmp_path / "work", model_name="builtin/tiny-qwen2", **kw)


def test_two_splits_in_one_in_process_run(model, tmp_path):
    runner, progress = FakeOpenCompass(), []
    out = _eval(model, tmp_path, runner, on_progress=lambda *a: progress.append(a))
    assert runner.runs == [["demo_add@validation", "demo_add@test"]]
    cfg = runner.configs[0]
    assert "debug=True" in cfg and "n=2" in cfg and "split='validation+test'" in cfg
    val, test = out["validation"], out["test"]
    assert (val.split, val.score, test.split, test.score) == ("validation", 50.0, "test", 25.0)
    assert val.metrics == {"demo_add": {"accuracy": 50.0}} and test.metrics == {"demo_add": {"accuracy": 25.0}}
    assert [s["dataset"] for s in val.error_samples] == ["demo_add"] and "validation" in val.error_samples[0]["question"]
    assert "test" in test.error_samples[0]["question"] and not out.failures
    phases = [p[0] for p in progress]
    assert phases[0] == "start" and phases[-1] == "done"
    assert ("infer:validation", 4, 4) in progress and ("eval:test", 4, 4) in progress


def test_each_split_is_cached_on_its_own(model, tmp_path):
    runner = FakeOpenCompass()
    first = _eval(model, tmp_path, runner, splits=("validation",))
    assert runner.runs == [["demo_add@validation"]] and not first["validation"].cached
    both = _eval(model, tmp_path, runner)
    assert runner.runs[-1] == ["demo_add@test"]  # only the missing split runs
    assert both["validation"].cached and not both["test"].cached and both["test"].score == 25.0
    again = _eval(model, tmp_path, runner)
    assert len(runner.runs) == 2 and again["validation"].cached and again["test"].cached


def test_a_failing_test_split_keeps_the_validation_result(model, tmp_path):
    runner = FakeOpenCompass(fail=lambda abbrs: any(a.endswith("@test") for a in abbrs))
    out = _eval(model, tmp_path, runner)
    assert runner.runs == [["demo_add@validation", "demo_add@test"], ["demo_add@validation"]]
    assert out["validation"].score == 50.0 and "test" not in out
    assert out.failures["test"].error_type == ErrorType.EVAL and "boom" in out.failures["test"].log_tail
    with pytest.raises(StepError):
        out.require("test")


def test_both_failing_raise_after_one_retry(model, tmp_path):
    runner = FakeOpenCompass(fail=lambda abbrs: True)
    with pytest.raises(StepError) as err:
        _eval(model, tmp_path, runner)
    assert err.value.error_type == ErrorType.EVAL and len(runner.runs) == 2
    assert "validation" in err.value.message


def test_a_timeout_is_not_retried(model, tmp_path):
    runner = FakeOpenCompass(timed_out=True)
    with pytest.raises(StepError) as err:
        _eval(model, tmp_path, runner)
    assert err.value.error_type == ErrorType.TIMEOUT and len(runner.runs) == 1


def test_isolated_layout_runs_one_split_per_run_without_suffix(model, tmp_path):
    runner = FakeOpenCompass()
    out = _eval(model, tmp_path, runner, isolate_tasks=True)
    assert runner.runs == [["demo_add"], ["demo_add"]] and "debug=True" not in runner.configs[0]
    assert out["validation"].score == 50.0 and out["test"].score == 25.0
    single = evaluate_model_path(model, None, benchmark=get_benchmark("demo_add"), split="test",
                                 settings=load_settings(file_path=tmp_path / "ft2", benchmark_limit=4),
                                 runner=runner, work_dir=tmp_path / "w2")
    assert single.score == 25.0 and runner.runs[-1] == ["demo_add@test"]


def _scenario(model: Path):
    return SimpleNamespace(benchmark="demo_add", base_model="builtin/tiny-qwen2", base_model_path=str(model),
                           hardware=SimpleNamespace(gpu_count=0),
                           items_root=lambda: None)  # no session copy: the shared folder is prepared


def test_baseline_is_one_run_for_both_splits(model, tmp_path):
    runner = FakeOpenCompass()
    results = evaluate_baseline(_scenario(model), load_settings(file_path=tmp_path / "ft", benchmark_limit=4), runner,
                                benchmark=get_benchmark("demo_add"), inference=inference_settings("builtin/tiny-qwen2"))
    assert runner.runs == [["demo_add@validation", "demo_add@test"]]
    assert results["validation"].score == 50.0 and results["test"].score == 25.0


@pytest.mark.parametrize("runner", [FakeOpenCompass(fail=lambda abbrs: True),
                                    FakeOpenCompass(crash=RuntimeError("docker went away"))])
def test_a_failed_baseline_is_one_clear_environment_failure(model, tmp_path, runner):
    settings = load_settings(file_path=tmp_path / "ft", benchmark_limit=4)
    with pytest.raises(BaselineEvaluationError) as err:
        evaluate_baseline(_scenario(model), settings, runner, benchmark=get_benchmark("demo_add"),
                          inference=inference_settings("builtin/tiny-qwen2"))
    assert isinstance(err.value, EnvironmentFailure) and err.value.failure.stage == "baseline"
    text = str(err.value)
    assert text.startswith("the baseline evaluation of builtin/tiny-qwen2 on demo_add failed")
    assert ("boom" in text) or ("docker went away" in text)


def test_parse_split_names():
    assert parse.split_abbr("demo_add", "test") == "demo_add@test"
    assert parse.split_of("demo_add@test", "test") == "demo_add"
    assert parse.split_of("demo_add@test", "validation") is None
    assert parse.split_of("demo_add", None) == "demo_add"


class MergingOpenCompass(FakeOpenCompass):
    """Also answers the LoRA merge command (writes the merged model folder)."""

    def __init__(self) -> None:
        super().__init__()
        self.merges = 0

    def run(self, cmd, **kwargs):
        if cmd[0] == "python" and answer_weights_check(cmd, None) is None:
            self.merges += 1
            out = Path(cmd[-1])
            out.mkdir(parents=True, exist_ok=True)
            (out / "config.json").write_text("{}")
            return RunResult(exit_code=0, duration_s=0.1)
        return super().run(cmd, **kwargs)


@pytest.mark.parametrize("modules_to_save,merged", [(None, False), (["lm_head"], True)])
def test_vllm_serves_lora_natively_or_merges_first(model, tmp_path, monkeypatch, modules_to_save, merged):
    from ftagent.tools.opencompass import runs
    from ftagent.tools.opencompass.backend import BackendChoice

    monkeypatch.setattr(runs, "choose_backend", lambda gpus, runner, **_: BackendChoice(
        backend="vllm", device="cuda", reason="test"))
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 8, "modules_to_save": modules_to_save}))
    (adapter / "adapter_model.safetensors").write_bytes(safetensors_bytes(b"lora"))
    (adapter / "chat_template.jinja").write_text("{{ messages }}")
    runner = MergingOpenCompass()
    settings = load_settings(file_path=tmp_path / "ft", benchmark_limit=4)
    out = evaluate_splits_of_path(adapter, None, benchmark=get_benchmark("demo_add"), settings=settings, runner=runner,
                                  work_dir=tmp_path / "work", base_path=model, model_name="builtin/tiny-qwen2",
                                  gpu_count=1)
    cfg = runner.configs[0]
    assert out["validation"].score == 50.0 and "VLLMwithChatTemplate" in cfg
    assert runner.merges == int(merged)
    assert ("merged_model" in cfg and "lora_path" not in cfg) if merged else (f"lora_path='{adapter}'" in cfg)
