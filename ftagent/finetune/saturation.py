"""The session stops starting loops once the best scores the metric's maximum (relay round r2's first finding).

Relay round r2 (demo_add, ``--loop-n 4``): loop 0 scored 100 % on validation, and loops 1-3 still ran (about an
hour of CPU) although none of them could become the best: every best rule (``FT_SOTA_RULE``, owned by
:mod:`ftagent.core.sota`) asks for a *gain* over the best — the interval rule a paired interval whose lower bound is
above ``FT_SOTA_MIN_DELTA``, the delta rule a score above the best by more than it — and nothing scores above the
maximum. A tie keeps the best, so the final model could no longer change, whatever later loops found.

:func:`saturation_guard` is asked before each loop starts (the engine's ``loop_guard``): when the current best
loop's whole validation score is at the metric's maximum (so every part of validation, the selection part that
decides included, is at it too) it answers a :class:`~ftagent.engine.context.Halt` with status ``saturated``. The
loops in flight finish and are judged as usual, the finish step (the final evaluation) runs, and ``session_end``,
the CLI (exit 0) and the report say why the remaining loops were not started. The system decides this from the
numbers, not the planner: the maximum is a fact of the metric (:func:`ftagent.planners.llm.numbers.metric_maximum`,
100 for a percentage to maximise; a metric without a known maximum never stops a session). A base model that
already scores the maximum does not stop the session (no loop has been judged yet; the baseline is reported).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ftagent.engine.context import Halt
from ftagent.planners.llm.numbers import format_score, scores_maximum

if TYPE_CHECKING:
    from ftagent.core.trace import Trace
    from ftagent.engine.context import StepContext
    from ftagent.finetune.state import FinetuneSessionState


def saturated_words(trace: Trace, loop_n: int | None, started: int) -> str | None:
    """Why no further loop is started (the best is at the metric's maximum), or None when one may be."""
    best = trace.sota()
    if best is None or not scores_maximum(best.val_score, trace.core_metric, trace.direction):
        return None
    left = "" if loop_n is None else f"; {max(loop_n - started, 0)} of the {loop_n} loops (--loop-n) were not started"
    return (f"stopped early: loop {best.loop}, the best, scores the metric's maximum on validation "
            f"({format_score(best.val_score, trace.core_metric)} {trace.core_metric}), so no later loop can replace it "
            f"(the best rule needs a gain over the best; a tie keeps it){left}")


def saturation_guard(ctx: StepContext[FinetuneSessionState], loop_n: int | None) -> Halt | None:
    """The ``saturated`` Halt before a loop starts (see the module docstring), or None."""
    state = ctx.state
    why = saturated_words(state.trace, loop_n, int(state.loop_index))
    return Halt("saturated", why) if why else None


def first_guard(*guards: Callable[[StepContext[FinetuneSessionState]], str | Halt | None],
                ) -> Callable[[StepContext[FinetuneSessionState]], str | Halt | None]:
    """One ``loop_guard`` of several: the first reason not to start a loop."""

    def guard(ctx: StepContext[FinetuneSessionState]) -> str | Halt | None:
        for one in guards:
            why = one(ctx)
            if why:
                return why
        return None

    return guard
