"""Early stop of a diverging training run, judged from LLaMA-Factory's ``trainer_log.jsonl`` points.

A full run that diverges (the loss turns NaN/Inf, or climbs far above its best and stays there) only
burns the loop's time: its model will not beat anything. :class:`DivergenceWatch` sees every logged
point (``current_steps``, ``total_steps``, ``loss``, ``lr``, ``elapsed_time``), decides, and returns a
:class:`Divergence` once; the trainer then stops the run through the runner and turns it into feedback.

The rule (thresholds from ``FT_EARLY_STOP_*``):

* a loss that is NaN or ±Inf stops at once (``logging_nan_inf_filter`` is off in the full run, so
  transformers logs it instead of averaging it away);
* a loss above the bar — ``loss_ratio`` × the best loss so far **and** at least ``min_rise`` nats above
  it — on every point over at least ``patience_steps`` optimizer steps, stops the run. A point counts as
  above only when both the logged loss and its smoothed curve (EMA, ``ema_alpha``) are above the bar, so
  one point back under the bar resets the stretch, and so does a curve that is falling back. Spikes of
  a healthy run are short; a run that has left its basin stays out.

Why an absolute floor (issue 35): a ratio alone misreads a converged run. Its loss near zero is noise
in relative terms — a real run went 0.0013 (step 1600) → 0.0179 → 0.0057 (step 2000), "13× its best",
and was stopped as diverged while it was falling. A diverging run rises by whole nats (lr 100 on
tiny-qwen2: 6.3 → 184912 → NaN; the cross-entropy of a model that has lost its weights is ~ln(vocab),
10+ nats), so a rise of less than 0.5 nats over the best is never judged a divergence.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel

from ftagent.engine.events import EarlyStopFacts
from ftagent.tools.llamafactory.progress import eta_seconds


class EarlyStopRule(BaseModel):
    """When a run counts as diverged."""

    enabled: bool = True
    loss_ratio: float = 3.0
    patience_steps: int = 20
    min_rise: float = 0.5  # nats above the best before a loss can count as diverging (see the module doc)
    ema_alpha: float = 0.5  # weight of the newest point in the smoothed curve

    def bar(self, best: float) -> float:
        """The loss above which a point counts as diverging, for a best loss of ``best``."""
        return max(self.loss_ratio * best, best + self.min_rise)

    @classmethod
    def from_settings(cls, ft: Any) -> EarlyStopRule:
        """The rule of ``FT_EARLY_STOP``, ``FT_EARLY_STOP_LOSS_RATIO``, ``FT_EARLY_STOP_PATIENCE_STEPS``."""
        return cls(enabled=ft.early_stop, loss_ratio=ft.early_stop_loss_ratio,
                   patience_steps=ft.early_stop_patience_steps)


class Divergence(EarlyStopFacts):
    """Why and where a run was stopped, and the training time that stop saved (the event's facts, plus
    the feedback line). ``since_step`` is the first step of the stretch above the bar (rise);
    ``saved_s`` the estimated remaining training time at the stop."""

    def message(self) -> str:
        """The feedback line: ``diverged at step k: loss …, lr …`` and the evidence."""
        lr = f"{self.lr:.3g}" if self.lr is not None else "?"
        of = f"/{self.total_steps}" if self.total_steps else ""
        text = f"diverged at step {self.step}{of}: loss {_fmt_loss(self.loss)}, lr {lr}"
        if self.reason == "nan":
            return text + " (the loss is not a finite number)"
        ratio = f"{_fmt_loss(self.loss / self.best_loss)}× " if self.best_loss else ""
        rise = f", +{_fmt_loss(self.loss - self.best_loss)}" if self.best_loss is not None else ""
        return (text + f" (above {ratio}its best {_fmt_loss(self.best_loss)} at step {self.best_step}{rise}, "
                f"since step {self.since_step})")


def _fmt_loss(value: float | None) -> str:
    if value is None:
        return "?"
    if not math.isfinite(value):
        return str(value)
    return f"{value:.4g}"


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        return float(value)
    except ValueError:
        return None


def remaining_seconds(point: dict[str, Any]) -> float | None:
    """Training time left after ``point``: steps left ÷ the steps/s so far (LLaMA-Factory's own ETA
    as a fallback)."""
    step, total = _num(point.get("current_steps")), _num(point.get("total_steps"))
    elapsed = eta_seconds(point.get("elapsed_time"))
    if step and total and elapsed and step > 0 and elapsed > 0:
        return max(0.0, (total - step) * elapsed / step)
    return eta_seconds(point.get("remaining_time"))


class DivergenceWatch:
    """Feed every trainer_log point to :meth:`observe`; it returns the :class:`Divergence` once."""

    def __init__(self, rule: EarlyStopRule) -> None:
        self.rule = rule
        self.best: tuple[int, float] | None = None  # (step, loss)
        self.since: int | None = None
        self.ema: float | None = None
        self.verdict: Divergence | None = None

    def observe(self, point: dict[str, Any]) -> Divergence | None:
        """Judge one point; the first divergence is returned (and kept in ``verdict``), later ones not."""
        if not self.rule.enabled or self.verdict is not None:
            return None
        loss, step = _num(point.get("loss")), _num(point.get("current_steps"))
        if loss is None or step is None:
            return None  # the final summary line, an eval-only line
        if not math.isfinite(loss):
            return self._stop("nan", point, loss)
        a = self.rule.ema_alpha
        self.ema = loss if self.ema is None else a * loss + (1 - a) * self.ema
        if self.best is None or loss < self.best[1]:
            self.best, self.since = (int(step), loss), None
            return None
        bar = self.rule.bar(self.best[1])
        if loss <= bar or self.ema <= bar:  # back under the bar, or a curve that has not left it: no stretch
            self.since = None
            return None
        self.since = int(step) if self.since is None else self.since
        if step - self.since >= self.rule.patience_steps:
            return self._stop("rise", point, loss)
        return None

    def _stop(self, reason: Literal["nan", "rise"], point: dict[str, Any], loss: float) -> Divergence:
        total = _num(point.get("total_steps"))
        self.verdict = Divergence(
            reason=reason, step=int(point["current_steps"]), total_steps=int(total) if total else None, loss=loss,
            lr=_num(point.get("lr")), best_loss=self.best[1] if self.best else None,
            best_step=self.best[0] if self.best else None, since_step=self.since,
            elapsed_s=eta_seconds(point.get("elapsed_time")), saved_s=remaining_seconds(point))
        return self.verdict
