"""The planner's time estimate before the first run: measured s/step, s/epoch and each loop's time share.

A step's time is not one number: it grows about in proportion to the tokens the step processes (effective
batch × tokens per row, each row cut at cutoff_len), so the lines give the time **per row** beside the time per
step and say how it scales (issue 43: the probe's "1.2 s per step" at batch 32 was read as the speed of any
batch; the loop that followed ran a larger one at 2.76 s/step). Per epoch, the batch changes little on a CPU:
the same rows are processed either way.

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


def _per_row(s_per_step: float, batch: int) -> str:
    return f"{s_per_step / max(1, batch):.2g} s per row"


SCALING = ("A step's time grows about in proportion to the tokens it processes (effective batch × tokens per row, "
           "each row cut at cutoff_len): twice the batch is about twice the time per step and about the same time per "
           "epoch, longer rows take longer")


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
            f"effective batch {plan.effective_batch}) {where}: {p.s_per_step:.2g} s per optimizer step measured "
            f"at that batch ({_per_row(p.s_per_step, plan.effective_batch)}); expect {low:.2g}-{high:.2g} s per step "
            f"while the load stays in that band (other processes share the CPUs; a busier machine is slower), plus "
            f"about {format_duration(p.startup_s)} to start each training run. One epoch of {plan.rows} rows is "
            f"{steps} steps at that batch, about {_span(steps * low, steps * high)}. {SCALING}.")
    if loop is not None:
        text += (f" Each loop also spends about {format_duration(loop.eval_s)} evaluating the candidate (both "
                 f"splits) and {format_duration(loop.other_s)} processing the data and checking it (the validate "
                 "step: config and template checks and a few training steps), besides its training.")
    # No time share here: the Budgets section gives the one per-loop figure (time left ÷ loops left,
    # prompting.time_left). A second one from --timeout / --loop-n went stale as the session ran and
    # contradicted it in the same prompt (issue 35).
    if forecast.timeout_s:
        text += (" Size this loop's training (rows x epochs, or max_steps) to the per-loop time under Budgets "
                 "minus the evaluation and checking time.")
    else:  # no --timeout: Budgets has no per-loop figure to point at (a played planner looked for one)
        text += (" No --timeout is set: the session has no wall-clock limit, only its number of loops, so size "
                 "the training by what the loss needs.")
    return text


def speed_update_line(forecast: Forecast | None, loop: int, runtime_s: float, steps: int,
                      rows_per_s: float | None = None) -> str:
    """After a training run: its measured s/step (and s per row, from its samples/s) beside the probe's (issue 35:
    a played planner lost the probe in loop 1, and the speed had changed from 0.12 to 0.22 s/step with the
    machine's load; issue 43: with the batch)."""
    if not steps or not runtime_s:
        return ""
    per_row = f", {1 / rows_per_s:.2g} s per row" if rows_per_s else ""
    text = (f"- Training speed on this hardware: the latest training run (loop {loop}) measured "
            f"{runtime_s / steps:.2g} s per optimizer step ({steps:,} steps in {format_duration(runtime_s)}{per_row}, "
            "its train_runtime ÷ optimizer steps, start-up not included)")
    if forecast is not None and forecast.train_probe is not None:
        p, plan = forecast.train_probe, forecast.plan
        text += (f"; the {p.steps}-step probe before the first run measured {p.s_per_step:.2g} s per step "
                 f"(finetuning_type {plan.method}, cutoff_len {plan.cutoff_len}, effective batch "
                 f"{plan.effective_batch}: {_per_row(p.s_per_step, plan.effective_batch)}), plus about "
                 f"{format_duration(p.startup_s)} to start each run")
    return text + (f". {SCALING}; the machine's load changes it too (other processes share the CPUs): size the next "
                   "run by the latest figure per row.")
