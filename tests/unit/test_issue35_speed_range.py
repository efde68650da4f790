"""Issue 35 (relay critique), item 5: the probe's s/step is shown as the measured value, how it was measured,
and the range to expect under the load it was measured in, not one falsely precise number."""

from __future__ import annotations

from ftagent.core.forecast_arithmetic import LOAD_BANDS, EvalProbe, TrainPlan, TrainProbe, build_forecast
from ftagent.planners.llm.preview import preview
from tests.helpers.prompt_view import fixed_machine  # noqa: F401 (fixed_machine: autouse)
from tests.unit.test_prompts import _demo_scenario, _settings


def _forecast(load: str):
    probe = TrainProbe(key="t", s_per_step=0.079, startup_s=10.0, validate_s=30.0, steps=10, load=load)
    plan = TrainPlan(method="full", rows=3000, epochs=2, effective_batch=8, cutoff_len=64)
    return build_forecast(planner="llm", loop_n=2, plan=plan, train=probe,
                          evaluation=EvalProbe(key="e", fixed_s=12.0, s_per_item=0.01, items=200))


def test_the_proposal_shows_the_measured_step_time_how_it_was_measured_and_a_range(tmp_path):
    scenario = _demo_scenario(tmp_path)
    scenario.forecast = _forecast("2 cpus, busy")
    text = preview("propose", scenario, _settings()).messages[-1]["content"]
    assert "measured once before the first run by a 10-step probe (its train_runtime ÷ optimizer steps" in text
    assert "on 2 cpus while the machine was busy (1-min load 0.5-1 per CPU)" in text
    # busy: L in [0.5, 1) → 0.079 × 1.5/2 … 0.079 × 2/1.5
    assert "0.079 s per optimizer step measured at that batch (0.0099 s per row); expect 0.059-0.11 s per step" in text
    assert "One epoch of 3000 rows is 375 steps at that batch, about 22 s-40 s" in text


def test_the_range_widens_with_the_load_band_and_without_one():
    ranges = {load: TrainProbe(key="t", s_per_step=1.0, startup_s=0, validate_s=0, steps=10, load=load)
              .s_per_step_range() for load in ("2 cpus, idle", "2 cpus, busy", "2 cpus, loaded", "2 cpus")}
    assert all(low < 1.0 < high for low, high in ranges.values())
    assert ranges["2 cpus"][1] > ranges["2 cpus, loaded"][1]  # no band recorded: the widest spread


def test_the_bands_are_the_ones_the_probe_cache_records():
    from ftagent.finetune.probe_cache import LOAD_BANDS as RECORDED

    assert [(hi, name) for name, (_lo, hi) in LOAD_BANDS.items() if name != "overloaded"] == list(RECORDED)
