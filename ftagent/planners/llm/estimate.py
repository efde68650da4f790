"""The planner's time estimate before the first run: measured s/step, s/epoch and each loop's time share.

The session's forecast (:mod:`ftagent.core.forecast`, measured by a probe after the baseline) is put
where the history would otherwise say the training speed is "not measured yet", so loop 0 is sized to
its share of the time (the Budgets section's per-loop figure) (an LLM once planned 30 epochs and spent 33 of 75 minutes in loop 0 for want of it).
"""

from __future__ import annotations

from ftagent.core.durations import format_duration
from ftagent.core.forecast import LOAD_BANDS, Forecast, band_of


def _span(low_s: float, high_s: float) -> str:
    """``40 s-1 min 30 s``: a duration range (one figure when both round alike)."""
    low, high = (format_duration(x) if x >= 60 else f"{x:.2g} s" for x in (low_s, high_s))
    return low if low == high else f"{low}-{high}"


def estimate_line(forecast: Forecast | None) -> str:
    """One self-explanatory bullet for the proposal prompt ("" without a forecast or its probe)."""
    if forecast is None or forecast.train_probe is None:
        return ""
    p, plan = forecast.train_probe, forecast.plan
    loop = forecast.loops[0] if forecast.loops else None
    low, high = p.s_per_step_range()
    band = band_of(p.load)
    where = (f"on {p.load.split(',')[0]} while the machine was {band} (1-min load {LOAD_BANDS[band][0]:g}-"
             f"{LOAD_BANDS[band][1]:g} per CPU)" if band else "on a machine whose load was not recorded")
    steps = plan.steps_per_epoch()
    text = (f"- Training speed on this hardware, measured once before the first run by a {p.steps}-step probe "
            f"(its train_runtime ÷ optimizer steps; finetuning_type {plan.method}, cutoff_len {plan.cutoff_len}, "
            f"effective batch {plan.effective_batch}) {where}: {p.s_per_step:.2g} s per optimizer step measured; "
            f"expect {low:.2g}-{high:.2g} s per step while the load stays in that band (other processes share the "
            f"CPUs; a busier machine is slower), plus about {format_duration(p.startup_s)} to start each training "
            f"run. One epoch of {plan.rows} rows is {steps} steps, about {_span(steps * low, steps * high)}; a "
            "larger batch or cutoff_len makes each step slower.")
    if loop is not None:
        text += (f" Each loop also spends about {format_duration(loop.eval_s)} on evaluation and "
                 f"{format_duration(loop.other_s)} on validation.")
    # No time share here: the Budgets section gives the one per-loop figure (time left ÷ loops left,
    # prompting.time_left). A second one from --timeout / --loop-n went stale as the session ran and
    # contradicted it in the same prompt (issue 35).
    if forecast.timeout_s:
        text += (" Size this loop's training (rows x epochs, or max_steps) to the per-loop time under Budgets "
                 "minus the evaluation and validation time.")
    else:  # no --timeout: Budgets has no per-loop figure to point at (a played planner looked for one)
        text += (" No --timeout is set: the session has no wall-clock limit, only its number of loops, so size "
                 "the training by what the loss needs.")
    return text


def speed_update_line(forecast: Forecast | None, loop: int, runtime_s: float, steps: int) -> str:
    """After a training run: its measured s/step beside the probe's (issue 35: a played planner lost the probe
    in loop 1, and the speed had changed from 0.12 to 0.22 s/step with the machine's load)."""
    if not steps or not runtime_s:
        return ""
    text = (f"- Training speed on this hardware: the latest training run (loop {loop}) measured "
            f"{runtime_s / steps:.2g} s per optimizer step ({steps:,} steps in {format_duration(runtime_s)}, its "
            "train_runtime ÷ optimizer steps, start-up not included)")
    if forecast is not None and forecast.train_probe is not None:
        p, plan = forecast.train_probe, forecast.plan
        text += (f"; the {p.steps}-step probe before the first run measured {p.s_per_step:.2g} s per step "
                 f"(finetuning_type {plan.method}, cutoff_len {plan.cutoff_len}, effective batch "
                 f"{plan.effective_batch}), plus about {format_duration(p.startup_s)} to start each run")
    return text + (". The speed changes with the machine's load (other processes share the CPUs), the batch and "
                   "cutoff_len: size the next run by the latest figure.")
