"""Issue 43, "What the planner reads": the speed figure says how it scales, the checking step is named, and
each fact of the code-writing prompts is said once, where it is used. Each test fails on d350dfe."""

from __future__ import annotations

from ftagent.core.forecast import Forecast, LoopForecast, TrainPlan, TrainProbe
from ftagent.planners.llm.estimate import estimate_line, speed_update_line


def _forecast() -> Forecast:
    probe = TrainProbe(key="t", s_per_step=1.2, startup_s=17.0, validate_s=28.0, steps=10, load="2 cpus, busy")
    return Forecast(planner="llm", loops=[LoopForecast(loop=0, train_s=300, eval_s=120, other_s=95)],
                    plan=TrainPlan(method="lora", rows=2000, epochs=1, effective_batch=32, cutoff_len=512),
                    timeout_s=3600, train_probe=probe)


def test_the_speed_figure_says_how_it_scales_with_the_batch():
    """d350dfe: '1.2 s per optimizer step measured; expect 0.9-1.6 s' with nothing of other batch sizes (the
    loop then ran 2.76 s/step)."""
    line = estimate_line(_forecast())
    assert "1.2 s per optimizer step measured at that batch (0.037 s per row)" in line
    assert "twice the batch is about twice the time per step and about the same time per epoch" in line
    assert "tokens it processes (effective batch × tokens per row" in line
    later = speed_update_line(_forecast(), 0, 276.0, 100, rows_per_s=16.0)
    assert "2.8 s per optimizer step (100 steps in 4 min 36 s, 0.062 s per row" in later
    assert "effective batch 32: 0.037 s per row" in later and "twice the batch" in later


def test_the_checking_step_is_named_not_called_validation():
    """'Each loop also spends … on validation' meant the validate step, not scoring the validation split."""
    line = estimate_line(_forecast())
    assert "on validation" not in line
    assert ("2 min evaluating the candidate (both splits) and 1 min 35 s processing the data and checking it (the "
            "validate step: config and template checks and a few training steps)") in line
    assert "minus the evaluation and checking time" in line
