"""The evaluation cache key includes the LLM judge's settings; FT_JUDGE_RETRY reaches the judge config."""

from __future__ import annotations

import ast

from ftagent.benchmarks.base import DatasetBlock
from ftagent.core.settings import load_settings
from ftagent.tools.opencompass.cache import EvalCache, cache_key
from ftagent.tools.opencompass.model_block import judge_block
from ftagent.tools.opencompass.render import ModelSpec, render_config

ARGS = ("digest", "aime25", "validation", {"limit": 10}, {"temperature": 0}, "3")


def test_cache_key_changes_with_the_judge(monkeypatch):
    monkeypatch.setenv("FT_JUDGE_API_KEY", "sk-judge-secret-0001")
    monkeypatch.setenv("FT_JUDGE_MODEL", "gpt-judge-a")
    judge_a = judge_block(load_settings())
    monkeypatch.setenv("FT_JUDGE_MODEL", "gpt-judge-b")
    judge_b = judge_block(load_settings())
    monkeypatch.setenv("FT_JUDGE_API_BASE", "http://judge.example/v1")
    judge_b_base = judge_block(load_settings())
    keys = {cache_key(*ARGS), cache_key(*ARGS, judge=judge_a), cache_key(*ARGS, judge=judge_b),
            cache_key(*ARGS, judge=judge_b_base)}
    assert len(keys) == 4  # no judge, judge A, judge B, judge B elsewhere: four different entries
    assert cache_key(*ARGS, judge=judge_a) == cache_key(*ARGS, judge=dict(judge_a))
    assert "sk-judge-secret-0001" not in repr(judge_a)  # the key itself is not part of it (nor needed)
    monkeypatch.delenv("FT_JUDGE_API_KEY")
    assert judge_block(load_settings()) is None  # no judge configured: the rule-only key


def test_judge_retry_reaches_the_opencompass_config(monkeypatch):
    monkeypatch.setenv("FT_JUDGE_API_KEY", "sk-judge-secret-0001")
    monkeypatch.setenv("FT_JUDGE_RETRY", "4")
    judge = judge_block(load_settings())
    assert judge["retry"] == "4"
    block = DatasetBlock(abbr="aime25", path="/d/validation.jsonl", input_columns=["question"], output_column="answer",
                         rounds=[{"role": "HUMAN", "prompt": "{question}"}], max_out_len=16,
                         evaluator="ftagent.tools.opencompass.oc_ext:BoxedIntAccEvaluator", judge=judge)
    src = render_config([block], ModelSpec(abbr="m", path="/m", tokenizer_path="/m"), benchmark="aime25",
                        split="validation")
    assert "retry=4," in src
    ast.parse(src)


def test_concurrent_puts_use_private_temp_files(tmp_path):
    from ftagent.core.types import EvalResult

    cache = EvalCache(tmp_path)
    result = EvalResult(benchmark="aime25", split="validation", core_metric="accuracy", score=0.5)
    cache.put("k", result)
    cache.put("k", result)
    assert [p.name for p in tmp_path.iterdir()] == ["k.json"] and cache.get("k").score == 0.5


def test_routed_judge_gets_the_gateway_but_the_cache_key_keeps_the_real_judge(monkeypatch):
    from types import SimpleNamespace

    monkeypatch.setenv("FT_JUDGE_API_KEY", "sk-judge-secret-0001")
    monkeypatch.setenv("FT_JUDGE_API_BASE", "http://judge.example/v1")
    settings = load_settings()
    identity = judge_block(settings)
    settings.judge_route = SimpleNamespace(url="http://127.0.0.1:40001/v1", token="ftgw-tok", refused=0)
    assert judge_block(settings) == identity  # the cache key's part: no port, no token
    settings.judge_route = SimpleNamespace(url="http://127.0.0.1:40002/v1", token="ftgw-other", refused=0)
    assert cache_key(*ARGS, judge=judge_block(settings)) == cache_key(*ARGS, judge=identity)
    routed = judge_block(settings, routed=True)
    assert routed["api_base"] == "http://127.0.0.1:40002/v1/" and routed["model"] == identity["model"]
    block = DatasetBlock(abbr="aime25", path="/d/validation.jsonl", input_columns=["question"], output_column="answer",
                         rounds=[{"role": "HUMAN", "prompt": "{question}"}], max_out_len=16,
                         evaluator="ftagent.tools.opencompass.oc_ext:BoxedIntAccEvaluator", judge=routed)
    src = render_config([block], ModelSpec(abbr="m", path="/m", tokenizer_path="/m"), benchmark="aime25",
                        split="validation")
    ast.parse(src)
    assert "http://127.0.0.1:40002/v1/" in src and "judge.example" not in src and "sk-judge" not in src
    assert "status_code_mappings={402: " in src  # budget spent: a reply that keeps the rule score, no crash
