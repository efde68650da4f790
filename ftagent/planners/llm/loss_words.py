"""A training run's loss curve in the planner's words: a few numbers and its trend (:func:`loss_summary`) and a
small sampled table (:func:`loss_table`) that shows the steps the summary names."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class LossSummary(BaseModel):
    """A loss curve in a few numbers."""

    points: int
    first: float
    last: float
    min: float
    min_step: int
    last_step: int
    trend: str  # "falling", "flat", "rising", "noisy"
    eval_last: float | None = None
    flat_from_step: int | None = None  # "fell early, then flat from step S"

    def named_steps(self) -> set[int]:
        """The steps the summary names, which the sampled table must show (relay round r2: "min 0.0001 at step
        4500" beside a table whose rows were 4250 and 4750)."""
        return {self.min_step, self.last_step} | ({self.flat_from_step} if self.flat_from_step is not None else set())

    def line(self) -> str:
        text = (f"{self.points} points, first {self.first:.4g}, last {self.last:.4g} (step {self.last_step}), "
                f"min {self.min:.4g} at step {self.min_step}; {self.trend}")
        if self.eval_last is not None:
            text += f"; last eval_loss {self.eval_last:.4g}"
        return text


def _losses(history: list[dict[str, Any]]) -> list[tuple[int, float]]:
    out: list[tuple[int, float]] = []
    for p in history:
        if isinstance(p, dict) and isinstance(p.get("loss"), (int, float)):
            step = p.get("step")
            out.append((int(step) if step is not None else len(out) + 1, float(p["loss"])))
    return out


# transformers' Trainer logs the loss rounded to 4 decimals (trainer.py, _maybe_log_save_evaluate:
# ``logs["loss"] = round(tr_loss_scalar / (...), 4)``), so near zero a step of 0.0001 is rounding, not
# a trend: 0.0003 → 0.0002 is "a third less" by ratio. A change in loss counts only when it is also
# larger than LOSS_NOISE_FLOOR in absolute terms (relay round 4: a curve flat at 0.0002-0.0003 for the
# last 45 % of the run was called "still falling at the end; noisy").
LOSS_NOISE_FLOOR = 5e-4


def _still_falling(values: list[float]) -> bool:
    """True when the last fifth of the curve still loses a tenth of its loss, and more than the noise
    floor (LOSS_NOISE_FLOOR) in absolute terms.

    A cosine or linear schedule flattens the end of a converged run (0.0016 → 0.0015 → 0.0015): that
    is levelling off. A curve that goes 0.0226 → 0.0169 in its last fifth while the learning rate
    decays to 0 is still falling, however small that is against the first steps' drop.
    """
    last = values[-max(3, len(values) // 5):]
    drop = last[0] - last[-1]
    return last[-1] < last[0] * 0.9 and drop > LOSS_NOISE_FLOOR  # sheds a tenth of its loss, above rounding


def _plateau_start(values: list[float], band: float = 1.25, min_share: float = 0.5) -> int | None:
    """Index from which every loss stays within ``band`` × the final loss or LOSS_NOISE_FLOOR above it, when
    that plateau covers more than ``min_share`` of the run (a curve that stopped learning early); else None.

    The floor: near zero the 4-decimal rounding makes a ratio meaningless (relay round r1: 0.0006 at step
    1,400, then 0.0005 ... 0.0001 to step 7,000 was "falling, levelling off at the end", 80 % of a run that
    had learnt everything)."""
    if len(values) < 6 or values[-1] < 0:
        return None
    top = max(values[-1] * band, values[-1] + LOSS_NOISE_FLOOR)
    start = len(values) - 1
    while start > 0 and values[start - 1] <= top:
        start -= 1
    return start if (len(values) - start) / len(values) > min_share else None


def loss_summary(history: list[dict[str, Any]]) -> LossSummary | None:
    """First/last/min and the trend of the second half against the first; None without losses."""
    pts = _losses(history)
    if not pts:
        return None
    values = [v for _, v in pts]
    step_min, v_min = min(pts, key=lambda p: p[1])
    half = max(1, len(values) // 2)
    early, late = sum(values[:half]) / half, sum(values[half:] or values[-1:]) / max(1, len(values[half:]) or 1)
    tail = values[-max(4, len(values) // 3):]
    rises = [b - a for a, b in zip(tail, tail[1:], strict=False) if b > a]
    noisy = (len(rises) >= len(tail) // 3
             and max(rises, default=0) > max(0.1 * abs(sum(tail) / len(tail)), LOSS_NOISE_FLOOR))
    flat_step = None
    if len(values) < 3:
        trend = "falling" if values[-1] < values[0] else "flat or rising"
    elif late < early * 0.97:
        flat_from = _plateau_start(values)
        if flat_from is not None:
            share = 1 - flat_from / len(values)
            flat_step = pts[flat_from][0]
            trend = (f"fell early, then flat from step {pts[flat_from][0]} for the last {share:.0%} of the run "
                     f"(within 25 % of the final loss or {LOSS_NOISE_FLOOR:g} of it): more steps alone will not "
                     "help, a run that ends there reaches the same loss; if the score falls short, look at the "
                     "data and the targets, or the learning rate")
        else:
            trend = "falling" + (", still falling at the end" if _still_falling(values)
                                 else ", levelling off at the end")
    elif late > early * 1.03:
        trend = "rising (diverging: learning rate too high?)"
    else:
        trend = "flat (not learning: learning rate too low, or nothing left to learn)"
    if noisy and len(values) >= 6:
        trend += "; noisy (try a lower learning rate or a larger batch)"
    evals = [float(p["eval_loss"]) for p in history
             if isinstance(p, dict) and isinstance(p.get("eval_loss"), (int, float))]
    return LossSummary(points=len(pts), first=values[0], last=values[-1], min=v_min, min_step=step_min,
                       last_step=pts[-1][0], trend=trend, eval_last=evals[-1] if evals else None,
                       flat_from_step=flat_step)


def loss_table(history: list[dict[str, Any]], rows: int = 12, keep: set[int] | frozenset[int] = frozenset()) -> str:
    """A compact Markdown table of ``rows`` evenly sampled points (first and last included), plus the loss points
    at the steps in ``keep`` (the ones the loss summary names: :meth:`LossSummary.named_steps`)."""
    pts = [p for p in history if isinstance(p, dict) and (p.get("loss") is not None or p.get("eval_loss") is not None)]
    if not pts:
        return ""
    if len(pts) > rows:
        idx = {round(i * (len(pts) - 1) / (rows - 1)) for i in range(rows)}
        idx |= {i for i, p in enumerate(pts) if p.get("step") in keep and p.get("loss") is not None}
        pts = [pts[i] for i in sorted(idx)]
    # the optional columns a run logged: eval loss, lr, and the other stages' own curves (issue 40)
    extra = [k for k in ("eval_loss", "lr", "accuracy", "reward", "kl", "completion_length", "chosen_reward")
             if any(p.get(k) is not None for p in pts)]
    head = ["step", "loss", *extra]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in pts:
        cells = [str(p.get("step", "")), _num(p.get("loss")), *(_num(p.get(k)) for k in extra)]
        lines.append("| " + " | ".join(cells) + " |")
    if "chosen_reward" in extra:
        lines.append("(chosen_reward: DPO's rewards/chosen, pref_beta × how much more likely the policy makes the "
                     "chosen answer than its start weights did; below 0 it makes the right answers less likely, even "
                     "while the preference accuracy rises)")
    return "\n".join(lines)


def _num(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) else ""


def failure_loss_history(failure: Any) -> list[dict[str, Any]]:
    """The loss points a failed training step kept in its details (a stopped, diverged run's curve)."""
    details = getattr(failure, "details", None) or {}
    points = details.get("loss_history") if isinstance(details, dict) else None
    return [p for p in points if isinstance(p, dict)] if isinstance(points, list) else []
