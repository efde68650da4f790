"""The planner's time estimate before the first run: measured s/step, s/epoch and each loop's time share.

A step's time is not one number: it grows about in proportion to the tokens the step processes (effective
batch × tokens per row, each row cut at cutoff_len), so the lines give the time **per row** beside the time per
step (issue 43: the probe's "1.2 s per step" at batch 32 was read as the speed of any batch; the loop that
followed ran a larger one at 2.76 s/step). How it scales with the batch is said only as far as it was measured:
between about the same and in proportion before two batches were measured, and what the probe's batch and the
latest run's show once they differ (relay round r2: on the tiny model 0.32 s/step at batch 32 and 0.31 at 16,
beside the words "twice the batch is about twice the time per step").

The session's forecast (:mod:`ftagent.core.forecast_arithmetic`, measured by a probe after the baseline) is put
where the history would otherwise say the training speed is "not measured yet", so loop 0 is sized to
its share of the time (the Budgets section's per-loop figure) (an LLM once planned 30 epochs and spent 33 of 75 minutes in loop 0 for want of it).
"""

from __future__ import annotations

from ftagent.core.durations import format_duration
from ftagent.core.forecast_arithmetic import LOAD_BANDS, Forecast, band_of


def _span(low_s: float, high_s: float) -> str:
    """``40 s-1 min 30 s``: a duration range (one figure when both round alike)."""
    low, high = (format_duration(x) if x >= 60 else f"{x:.2g} s" for x in (low_s, high_s))
    return low if low == high else f"{low}-{high}"


def _per_row(s_per_step: float, batch: int) -> str:
    return f"{s_per_step / max(1, batch):.2g} s per row"


_RANGE = ("between about the same at any batch (a small model, whose steps have fixed costs) and in proportion to the "
          "batch (a model large enough to keep the machine busy)")
# no scaling law is asserted: "twice the batch is about twice the time per step" stood beside 0.32 s/step at batch 32
# and 0.31 s/step at batch 16 on the tiny model (relay round r2), after 1.2 s at 32 and 2.76 s at a larger batch on a
# bigger one (issue 43)
SCALING = (f"A step's time depends on the batch and the tokens per row (each row cut at cutoff_len), {_RANGE}; one "
           "batch measured does not say which")


def batch_scaling(probe_batch: int, probe_s: float, run_batch: int | None, run_s: float) -> str:
    """What the probe and the latest run, measured at two batches, say of a step's time ("" at one batch)."""
    if not run_batch or run_batch == probe_batch or not probe_s or not run_s:
        return ""
    (lo_b, lo_s), (hi_b, hi_s) = sorted(((probe_batch, probe_s), (run_batch, run_s)))
    step_ratio, batch_ratio = hi_s / lo_s, hi_b / lo_b
    if step_ratio >= 0.8 * batch_ratio:
        how = "about in proportion to the batch (the time per row stayed about the same)"
    elif step_ratio <= 1.25:
        how = (f"about the same at both batches ({step_ratio:.2g}× the time per step for {batch_ratio:.2g}× the rows): "
               "on this model a step's fixed costs dominate, so a larger batch takes about the same time per step and "
               "less per epoch")
    else:
        how = f"less than in proportion to the batch ({step_ratio:.2g}× the time per step for {batch_ratio:.2g}× the rows)"
    return f"Measured here: {lo_s:.2g} s per step at batch {lo_b}, {hi_s:.2g} s at batch {hi_b}: a step's time was {how}"


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
            f"{steps} steps at that batch, about {_span(steps * low, steps * high)}. {SCALING}; the first "
            "run's speed is measured and shown to the loops after it.")
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
                      rows_per_s: float | None = None, batch: int | None = None) -> str:
    """After a training run: its measured s/step at its effective ``batch`` (and s per row, from its samples/s)
    beside the probe's (issue 35: a played planner lost the probe in loop 1, and the speed had changed from 0.12 to
    0.22 s/step with the machine's load; issue 43: with the batch), and what the two batches say of the scaling."""
    if not steps or not runtime_s:
        return ""
    per_row = f", {1 / rows_per_s:.2g} s per row" if rows_per_s else ""
    at = f" at effective batch {batch}" if batch else ""
    text = (f"- Training speed on this hardware: the latest training run (loop {loop}) measured "
            f"{runtime_s / steps:.2g} s per optimizer step{at} ({steps:,} steps in {format_duration(runtime_s)}"
            f"{per_row}, its train_runtime ÷ optimizer steps, start-up not included)")
    scaling = SCALING
    if forecast is not None and forecast.train_probe is not None:
        p, plan = forecast.train_probe, forecast.plan
        text += (f"; the {p.steps}-step probe before the first run measured {p.s_per_step:.2g} s per step "
                 f"(finetuning_type {plan.method}, cutoff_len {plan.cutoff_len}, effective batch "
                 f"{plan.effective_batch}: {_per_row(p.s_per_step, plan.effective_batch)}), plus about "
                 f"{format_duration(p.startup_s)} to start each run")
        scaling = batch_scaling(plan.effective_batch, p.s_per_step, batch, runtime_s / steps) or scaling
    return text + (f". {scaling}; the machine's load changes it too (other processes share the CPUs): size the next "
                   "run by the figure measured at the batch closest to the one you plan.")
