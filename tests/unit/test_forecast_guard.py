"""The forgetting guard's evaluations in the forecast (FT_GUARD_BENCHMARKS: extra evaluations per loop)."""

from __future__ import annotations

import pytest

from ftagent.core.errors import UserInputError
from ftagent.core.forecast_arithmetic import EvalProbe, TrainPlan, TrainProbe, build_forecast, eval_seconds
from ftagent.finetune.forgetting_guard import guard_items
from tests.unit.test_prompts import _demo_scenario, _settings

TRAIN = TrainProbe(key="t", s_per_step=0.2, startup_s=10.0, validate_s=30.0, revalidate_s=15.0, steps=10)
EVAL = EvalProbe(key="e", fixed_s=12.0, s_per_item=0.01, items=200)


def test_guard_evaluations_add_to_each_loops_evaluate_time():
    plan = TrainPlan(method="lora", rows=100, max_steps=10, effective_batch=8)
    plain = build_forecast(planner="heuristic", loop_n=3, plan=plan, train=TRAIN, evaluation=EVAL)
    guarded = build_forecast(planner="heuristic", loop_n=3, plan=plan, train=TRAIN, evaluation=EVAL,
                             guard_items=[50, 100])
    one = eval_seconds(EVAL, 50) + eval_seconds(EVAL, 100)  # 12.5 + 13.0: each run's fixed cost + its items
    assert one == 25.5
    # loop 0: the base model's guard runs too; later loops: the candidate's only
    assert [lp.eval_s for lp in guarded.loops] == [lp.eval_s + k * one for lp, k in zip(plain.loops, (2, 1, 1),
                                                                                           strict=True)]
    assert guarded.total_s == pytest.approx(plain.total_s + 4 * one)
    assert guarded.baseline_eval_s == plain.baseline_eval_s  # the target's baseline is unchanged


def test_guard_items_from_the_settings_and_the_forecast(tmp_path):
    from ftagent.finetune.session_forecast import make_forecast

    assert guard_items(_settings(), "demo_add") == []  # no guard: nothing added
    assumptions: list[str] = []
    assert guard_items(_settings(guard_benchmarks=["gsm8k", "mmlu"], guard_sample=20), "demo_add", assumptions) == [
        20, 20]
    assert "gsm8k: 20 items, mmlu: 20 items" in assumptions[0] and "upper bound" in assumptions[0]
    with pytest.raises(UserInputError):
        guard_items(_settings(guard_benchmarks=["demo_add"]), "demo_add")  # the target itself

    scenario = _demo_scenario(tmp_path)
    kw = dict(planner="heuristic", loop_n=2, timeout_s=None, baseline_needed=False)
    plain = make_forecast(scenario, _settings(file_path=str(tmp_path / "f")), TRAIN, EVAL, **kw)
    guarded = make_forecast(scenario, _settings(file_path=str(tmp_path / "f"), guard_benchmarks=["gsm8k"],
                                                guard_sample=30), TRAIN, EVAL, **kw)
    run = eval_seconds(EVAL, 30)
    assert [g.eval_s - p.eval_s for g, p in zip(guarded.loops, plain.loops, strict=True)] == pytest.approx(
        [2 * run, run])
    assert any("forgetting guard" in a for a in guarded.assumptions)
    assert not any("forgetting guard" in a for a in plain.assumptions)
