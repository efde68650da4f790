"""The answer extractors and evaluators that benchmark YAML files name (exact_match, boxed_integer,
multiple_choice, numeric_tolerance, contains), loaded against a minimal OpenCompass stand-in (the project
venv has no OpenCompass; the real one runs them in tests/integration/test_user_benchmark.py)."""

from __future__ import annotations

import importlib
import sys
import types

import pytest

from ftagent.benchmarks.components import EXTRACTORS, METRICS, USER_METRICS, component_path
from ftagent.tools.opencompass import provides  # noqa: F401 - registers the "@Name" components


@pytest.fixture()
def oc_ext(monkeypatch):
    class BaseEvaluator:
        def __init__(self, pred_postprocessor=None) -> None:
            self.pred_postprocessor = pred_postprocessor

    class Registry:
        def register_module(self, name=None):
            return lambda obj: obj

    models = types.ModuleType("opencompass.models")
    models.HuggingFacewithChatTemplate = type("HuggingFacewithChatTemplate", (), {})
    models.OpenAISDK = type("OpenAISDK", (), {})
    icl = types.ModuleType("opencompass.openicl.icl_evaluator")
    icl.BaseEvaluator = BaseEvaluator
    reg = types.ModuleType("opencompass.registry")
    reg.ICL_EVALUATORS = reg.MODELS = reg.TEXT_POSTPROCESSORS = Registry()
    for name, mod in {"opencompass": types.ModuleType("opencompass"), "opencompass.models": models,
                      "opencompass.openicl": types.ModuleType("opencompass.openicl"),
                      "opencompass.openicl.icl_evaluator": icl, "opencompass.registry": reg}.items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.delitem(sys.modules, "ftagent.tools.opencompass.oc_ext", raising=False)
    module = importlib.import_module("ftagent.tools.opencompass.oc_ext")
    yield module
    sys.modules.pop("ftagent.tools.opencompass.oc_ext", None)


def _score(oc_ext, metric: str, outputs: list[str], golds: list[str]) -> float:
    """Run a metric as OpenCompass does: its extractor on each output, then its evaluator."""
    mdef = METRICS.get(metric)
    post = EXTRACTORS.get(mdef.extractor or "none")
    extract = (getattr(oc_ext, component_path(post.postprocessor).partition(":")[2]) if post.postprocessor
               else (lambda t: t))
    evaluator = getattr(oc_ext, component_path(mdef.evaluator).partition(":")[2])(**mdef.kwargs)
    result = evaluator.score([extract(o, **post.kwargs) for o in outputs], golds)
    assert len(result["details"]) == len(golds)
    return result["accuracy"]


@pytest.mark.parametrize("metric,outputs,golds,expected", [
    ("exact_match", ["57", " 57.\n", "'57'", "58", "57 apples"], ["57"] * 5, 60.0),
    ("boxed_integer", ["so \\boxed{57}", "\\boxed{57.0}", "57", "\\boxed{58}"], ["57"] * 4, 50.0),
    # a gold written in the answer format is read as the reply is (a correct reply scored 0 before)
    ("boxed_integer", ["\\boxed{43}", "so \\boxed{102}", "\\boxed{44}"], ["\\boxed{43}", "\\boxed{102}", "\\boxed{43}"],
     200 / 3),
    ("numeric_tolerance", ["\\boxed{2.5}", "3"], ["\\boxed{2.5}", "\\boxed{4}"], 50.0),
    ("multiple_choice", ["B", "The answer is (B).", "Answer: C", "b"], ["B", "B", "B", "B"], 50.0),
    ("numeric_tolerance", ["about 3.14159", "x = 1,000", "\\boxed{2.5}", "none"], ["3.1416", "1000", "2.6", "1"], 50.0),
    ("contains", ["The capital is Paris.", "paris", "Lyon"], ["Paris", "Paris", "Paris"], 200 / 3),
])
def test_user_metrics_score_as_documented(oc_ext, metric, outputs, golds, expected):
    assert metric in USER_METRICS
    assert _score(oc_ext, metric, outputs, golds) == pytest.approx(expected)


def test_extractors(oc_ext):
    assert oc_ext.strip_answer('  "42."  ') == "42"
    assert oc_ext.option_letter("I think (C) because A is wrong") == "C"
    assert oc_ext.option_letter("no letter here") == ""
    assert oc_ext.last_number("3 apples, then \\boxed{-1.5e3}") == "-1.5e3"
    assert oc_ext.last_number("1,234 and 5,678") == "5678"
    assert oc_ext.ExactMatchEvaluator(ignore_case=True).score(["YES"], ["yes"])["accuracy"] == 100.0
    assert oc_ext.ExactMatchEvaluator().score(["a"], ["a", "b"]) == {"error": "predictions and references have different length"}


def test_declared_metric_kwargs_are_the_evaluators_own(oc_ext):
    """Issue 34.11: `MetricDef.accepts` (what a YAML's metric_kwargs are checked against at start-up) is
    exactly what each of ftagent's evaluators in oc_ext takes, so the early check refuses nothing that works."""
    import inspect

    from ftagent.benchmarks.components import BASE_EVALUATOR_KWARGS

    for name in USER_METRICS + ("python_tests",):
        mdef = METRICS.get(name)
        cls = getattr(oc_ext, component_path(mdef.evaluator).partition(":")[2])
        params = [p.name for p in inspect.signature(cls.__init__).parameters.values()
                  if p.name not in ("self", *BASE_EVALUATOR_KWARGS) and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
        assert mdef.accepts is not None and sorted(mdef.accepts) == sorted(params), name
