"""Real OpenCompass on CPU with the tiny model (demo_add, 20 validation items)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ftagent.core.errors import StepError
from ftagent.core.settings import load_settings
from ftagent.tools.opencompass.evaluator import evaluate_model_path

pytestmark = pytest.mark.integration


class CountingRunner:
    """Wraps the local runner and counts OpenCompass invocations."""

    name = "counting"

    def __init__(self, tools_env: Path) -> None:
        from ftagent.runners.local import LocalRunner

        self.inner = LocalRunner(tools_env, sandbox="none")
        self.calls = 0

    def run(self, cmd, **kwargs):
        self.calls += 1
        return self.inner.run(cmd, **kwargs)


def test_untrained_scores_zero_then_cache_hit(tools_env, tiny_model, tmp_path):
    settings = load_settings(file_path=tmp_path / "ft", benchmark_limit=20)
    runner = CountingRunner(tools_env)
    kwargs = dict(benchmark="demo_add", split="validation", settings=settings, runner=runner,
                  work_dir=tmp_path / "work", model_name="builtin/tiny-qwen2", timeout=600)
    t0 = time.monotonic()
    first = evaluate_model_path(tiny_model, None, **kwargs)
    cold = time.monotonic() - t0
    assert runner.calls == 1 and not first.cached
    assert first.score == 0.0 and first.metrics == {"demo_add": {"accuracy": 0.0}}
    assert len(first.error_samples) == 10 and "What is" in first.error_samples[0]["question"]
    t0 = time.monotonic()
    second = evaluate_model_path(tiny_model, None, **kwargs)
    assert runner.calls == 1 and second.cached and second.score == 0.0
    assert time.monotonic() - t0 < cold / 10


def test_broken_model_is_step_error(tools_env, tiny_model, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in tiny_model.iterdir():
        if f.name != "model.safetensors":
            (broken / f.name).write_bytes(f.read_bytes())
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    settings = load_settings(file_path=tmp_path / "ft", benchmark_limit=4)
    with pytest.raises(StepError) as err:
        evaluate_model_path(broken, None, benchmark="demo_add", split="validation", settings=settings,
                            runner=CountingRunner(tools_env), work_dir=tmp_path / "work", timeout=600)
    assert err.value.error_type.value == "EVAL"
    assert "logs/infer" in err.value.log_tail
