"""The scoring a rendered config applies to the core benchmarks is stock OpenCompass's.

* FinanceIQ: stock ``FinanceIQ_gen_e0e6b5``'s ``first_capital_postprocess`` (the last capital turned
  "答案是 B。A股…" into A);
* aime24/aime25/math: stock ``MATHVerifyEvaluator``'s rule (``oc_math.MathVerifyEvaluator``: its timeouts
  retried wider, one details entry per item) with no dataset post-processor (v2 string matching
  marked ``\\boxed{033}`` against 33 wrong), so aime25's judge is handed the raw output;
* every backend: stock's model-level ``extract-non-reasoning-content`` before the dataset's step (the HF
  backend had none, so ``<think>…</think>`` reached the extractor).
The verdicts themselves are measured against stock in ``tests/parity``.
"""

from __future__ import annotations

import ast

import pytest

from ftagent.benchmarks import get_benchmark
from ftagent.benchmarks.components import component_path
from tests.parity.core_common import ours_config

MODEL_STEP = "pred_postprocessor=dict(type='extract-non-reasoning-content')"


def test_financeiq_uses_stock_first_capital():
    bench = get_benchmark("FinanceIQ_gen")
    assert bench.postprocessor == "opencompass.utils.text_postprocessors:first_capital_postprocess"
    assert "first upper-case letter" in bench.spec.answer_rule


@pytest.mark.parametrize("key", ["aime24", "aime25", "math"])
def test_math_family_uses_stock_math_verify_on_the_raw_output(key):
    bench = get_benchmark(key)
    assert component_path(bench.evaluator) == "ftagent.tools.opencompass.oc_math:MathVerifyEvaluator"
    assert bench.postprocessor is None and bench.evaluator_kwargs == {}


def test_aime25_judge_block_has_no_dataset_postprocessor(tmp_path):
    judge = {"model": "judge-m", "key_env": "ENV", "api_base": "http://127.0.0.1:9/v1/", "retry": "0"}
    src = ours_config("aime25", tmp_path, judge=judge).read_text(encoding="utf-8")
    assert "CascadeEvaluator" in src and "rule_evaluator=dict(type=MathVerifyEvaluator)" in src
    eval_cfg = src.split("eval_cfg=dict(", 1)[1].split("\nmodels = [", 1)[0]
    assert "pred_postprocessor" not in eval_cfg  # the cascade (rule and judge) sees the raw prediction


@pytest.mark.parametrize("backend", ["hf", "vllm", "vllm-server"])
def test_every_backend_strips_thinking_at_model_level(tmp_path, backend):
    src = ours_config("gsm8k", tmp_path, backend=backend).read_text(encoding="utf-8")
    ast.parse(src)
    models = src.split("\nmodels = [", 1)[1]
    assert models.count(MODEL_STEP) == 1


def test_judge_retry_zero_is_refused(monkeypatch):
    """OpenCompass's ``OpenAISDK`` loops ``while num_retries < retry``: with 0 the judge is never called and
    every rule miss ends the evaluation with 'Calling OpenAI API failed' (test_core_judge.py runs it)."""
    from ftagent.core.errors import UserInputError
    from ftagent.core.settings import load_settings

    monkeypatch.setenv("FT_JUDGE_RETRY", "0")
    with pytest.raises(UserInputError, match="FT_JUDGE_RETRY=0"):
        load_settings()
