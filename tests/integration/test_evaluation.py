"""Real OpenCompass on CPU with the tiny model (demo_add, 20 items per split).

The in-process path (validation + test in one OpenCompass process) must give exactly what the
earlier layout gave (one run per split, one subprocess per task): same scores, metrics, error
samples and per-item predictions, on a noised copy of the tiny model whose outputs differ by item.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from ftagent.benchmarks import get_benchmark
from ftagent.core.errors import StepError
from ftagent.core.settings import load_settings
from ftagent.tools.opencompass import parse
from ftagent.tools.opencompass.evaluator import evaluate_model_path
from ftagent.tools.opencompass.runs import evaluate_splits_of_path

pytestmark = pytest.mark.integration


class CountingRunner:
    """Wraps the local runner and counts OpenCompass invocations (and, apart, the weights checks before them)."""

    name = "counting"

    def __init__(self, tools_env: Path) -> None:
        from ftagent.runners.local import LocalRunner

        self.inner = LocalRunner(tools_env, sandbox="none")
        self.calls = self.weight_checks = 0

    def run(self, cmd, **kwargs):
        if str(cmd[1]).endswith("weights_script.py"):
            self.weight_checks += 1
        else:
            self.calls += 1
        return self.inner.run(cmd, **kwargs)


def test_untrained_scores_zero_then_cache_hit(tools_env, tiny_model, tmp_path):
    settings = load_settings(file_path=tmp_path / "ft", benchmark_limit=20)
    runner = CountingRunner(tools_env)
    kwargs = dict(benchmark=get_benchmark("demo_add"), split="validation", settings=settings, runner=runner,
                  work_dir=tmp_path / "work", model_name="builtin/tiny-qwen2", timeout=600)
    t0 = time.monotonic()
    first = evaluate_model_path(tiny_model, None, **kwargs)
    cold = time.monotonic() - t0
    assert runner.calls == 1 and not first.cached and runner.weight_checks == 1  # issue 43: checked first
    assert first.score == 0.0 and first.metrics == {"demo_add": {"accuracy": 0.0}}
    assert len(first.error_samples) == 10 and "What is" in first.error_samples[0]["question"]
    t0 = time.monotonic()
    second = evaluate_model_path(tiny_model, None, **kwargs)
    assert runner.calls == 1 and second.cached and second.score == 0.0
    assert time.monotonic() - t0 < cold / 10


def test_broken_model_is_step_error(tools_env, tiny_model, tmp_path):
    """A model whose weights fit (the weights check passes, issue 43) but that OpenCompass cannot load: its
    tokenizer file is broken. A cut weight file never gets this far (tests/*/test_weights_check.py)."""
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in tiny_model.iterdir():
        if f.name != "tokenizer.json":
            (broken / f.name).write_bytes(f.read_bytes())
    (broken / "tokenizer.json").write_bytes(b"not a tokenizer file")
    settings = load_settings(file_path=tmp_path / "ft", benchmark_limit=4)
    with pytest.raises(StepError) as err:
        evaluate_model_path(broken, None, benchmark=get_benchmark("demo_add"), split="validation", settings=settings,
                            runner=CountingRunner(tools_env), work_dir=tmp_path / "work", timeout=600)
    assert err.value.error_type.value == "EVAL"
    assert "Traceback" in err.value.log_tail  # the in-process run's own traceback, from the streamed log


NOISE = """
import shutil, sys, torch
from pathlib import Path
from transformers import AutoModelForCausalLM
src, out = Path(sys.argv[1]), Path(sys.argv[2])
torch.manual_seed(0)
model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
with torch.no_grad():
    for p in model.parameters():
        p.add_(torch.randn_like(p) * 0.5)
model.save_pretrained(out)
for f in src.iterdir():
    if f.name.startswith("tokenizer") or f.name in ("chat_template.jinja", "special_tokens_map.json"):
        shutil.copy(f, out / f.name)
"""


@pytest.fixture(scope="module")
def noisy_model(tools_python, tiny_model, tmp_path_factory) -> Path:
    """The tiny model plus seeded weight noise: its outputs differ from item to item."""
    out = tmp_path_factory.mktemp("noisy") / "tiny-qwen2-noisy"
    subprocess.run([str(tools_python), "-c", NOISE, str(tiny_model), str(out)], check=True, capture_output=True)
    return out


def test_in_process_run_matches_the_per_task_layout(tools_env, noisy_model, tmp_path):
    runs = {}
    for layout, isolate in (("old", True), ("new", False)):
        runner = CountingRunner(tools_env)
        settings = load_settings(file_path=tmp_path / f"ft_{layout}", benchmark_limit=20)
        runs[layout] = (evaluate_splits_of_path(
            noisy_model, None, benchmark=get_benchmark("demo_add"), splits=("validation", "test"), settings=settings,
            runner=runner, work_dir=tmp_path / f"work_{layout}", model_name="builtin/tiny-qwen2", timeout=900,
            isolate_tasks=isolate), runner.calls)
    (old, old_calls), (new, new_calls) = runs["old"], runs["new"]
    assert old_calls == 2 and new_calls == 1  # one OpenCompass run for both splits
    new_run = Path(new["validation"].run_dir)
    assert new_run == Path(new["test"].run_dir)
    log = (tmp_path / "work_new" / "opencompass_validation_test.log").read_text(encoding="utf-8")
    assert log.count("OpenCompass - INFO - Task [") == 1  # one inference task, in the opencompass process
    outputs = set()
    for split in ("validation", "test"):
        a, b = old[split], new[split]
        assert (a.score, a.metrics, a.error_samples) == (b.score, b.metrics, b.error_samples)
        preds_old = parse.read_predictions(Path(a.run_dir))
        preds_new = parse.read_predictions(new_run, split)
        assert preds_old == preds_new and len(preds_new["demo_add"]) == 20
        outputs |= set(preds_new["demo_add"].values())
    assert len(outputs) > 20  # the comparison can fail: predictions differ from item to item
