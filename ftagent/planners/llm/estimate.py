"""The planner's time estimate before the first run: measured s/step, s/epoch and each loop's time share.

The session's forecast (:mod:`ftagent.core.forecast`, measured by a probe after the baseline) is put
where the history would otherwise say the training speed is "not measured yet", so loop 0 is sized to
its share of ``--timeout`` (an LLM once planned 30 epochs and spent 33 of 75 minutes in loop 0 for want of it).
"""

from __future__ import annotations

from ftagent.core.durations import format_duration
from ftagent.core.forecast import Forecast


def estimate_line(forecast: Forecast | None) -> str:
    """One self-explanatory bullet for the proposal prompt ("" without a forecast or its probe)."""
    if forecast is None or forecast.train_probe is None:
        return ""
    p, plan = forecast.train_probe, forecast.plan
    loop = forecast.loops[0] if forecast.loops else None
    text = (f"- Training speed on this hardware (measured before the first run by a {p.steps}-step probe with "
            f"finetuning_type {plan.method}, cutoff_len {plan.cutoff_len}, effective batch {plan.effective_batch}): "
            f"{p.s_per_step:.3g} s per optimizer step, plus about {format_duration(p.startup_s)} to start each "
            f"training run. One epoch of {plan.rows} rows is {plan.steps_per_epoch()} steps, about "
            f"{format_duration(forecast.s_per_epoch)}; a larger batch or cutoff_len makes each step slower.")
    if loop is not None:
        text += (f" Each loop also spends about {format_duration(loop.eval_s)} on evaluation and "
                 f"{format_duration(loop.other_s)} on validation.")
    share = forecast.loop_share_s()
    if share is not None:
        train_share = max(0.0, share - (loop.eval_s + loop.other_s if loop else 0.0))
        text += (f" The session budget (--timeout) of {format_duration(forecast.timeout_s)} for "
                 f"{len(forecast.loops)} loop(s) is about {format_duration(share)} per loop, so this loop's "
                 f"training should take at most about {format_duration(train_share)}: choose rows x epochs "
                 "(or max_steps) that fit.")
    return text
