"""One step of one loop, as both engines run it (:class:`~ftagent.engine.loop.LoopEngine` one loop at a time,
:mod:`ftagent.engine.parallel` K at once): the step's own semantics, apart from the bookkeeping of the session.

:func:`run_step` emits ``step_start``, calls the step and turns what happened into a :class:`StepOutcome`:
a :class:`~ftagent.engine.loop.Goto` within its cap jumps back, past the cap fails the loop; any exception
becomes a :class:`StepFailure` and the loop goes on at the feedback step. Only ``EnvironmentFailure``,
``BudgetExhausted`` and ``KeyboardInterrupt`` propagate (with their ``step_end`` written), and so does a full
disk (any step, the session's folders named) and a failing feedback step (as ``EnvironmentFailure``). The
caller writes the outcome's ``step_end`` (:meth:`StepOutcome.end_event`) once its bookkeeping is done.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ftagent.core.disk import check_disk_full
from ftagent.core.errors import BudgetExhausted, EnvironmentFailure, ErrorType, StepError, StepFailure
from ftagent.engine.context import Goto, StepContext, StepFn
from ftagent.engine.events import StepEnd, StepStart
from ftagent.engine.session import LoopState, S


@dataclass
class StepOutcome:
    """What one step did to its loop."""

    name: str
    seq: int
    next_seq: int
    status: Literal["ok", "failed", "goto"]
    took: float
    failure: StepFailure | None = None
    goto: str | None = None

    def end_event(self) -> StepEnd:
        return StepEnd(step=self.name, status=self.status, duration_s=self.took, failure=self.failure, goto=self.goto)


def failure_from(exc: BaseException, stage: str) -> StepFailure:
    """The structured failure of an exception a step raised (its type says what stopped it)."""
    if isinstance(exc, StepError):
        return exc.to_failure(stage)
    tail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-3000:]
    # what stopped the step says its type (issue 34.12: these were UNKNOWN, "[train/UNKNOWN]" in the report):
    # an interruption ("terminated by SIGTERM") or the environment (a full disk, with what to free)
    if isinstance(exc, KeyboardInterrupt):
        return StepFailure(stage=stage, error_type=ErrorType.INTERRUPTED,
                           message=str(exc) or "interrupted by the user", log_tail=tail)
    if isinstance(exc, EnvironmentFailure):
        return StepFailure(stage=stage, error_type=ErrorType.ENV, message=str(exc), log_tail=tail)
    return StepFailure(stage=stage, error_type=ErrorType.UNKNOWN, message=f"{type(exc).__name__}: {exc}",
                       log_tail=tail)


def run_step(workflow: Any, steps: Sequence[tuple[str, StepFn[S]]], ctx: StepContext[S], loop: LoopState, seq: int,
             clock: Callable[[], float], session_dir: Path) -> StepOutcome:
    """Run step ``seq`` of ``loop`` (see the module docstring); updates the loop's failure, jumps and time."""
    names = [n for n, _ in steps]
    name, fn = steps[seq]
    ctx.emit(StepStart(step=name))
    t0 = clock()
    next_seq = seq + 1
    status: Literal["ok", "failed", "goto"] = "ok"
    goto_target = None
    failure: StepFailure | None = None
    try:
        result = fn(ctx)
        if isinstance(result, Goto):
            cap = workflow.goto_caps.get(result.step, 0)
            used = loop.gotos.get(result.step, 0)
            if used >= cap:
                failure = StepFailure(
                    stage=name, error_type=result.error_type or ErrorType.CONFIG,
                    message=f"gave up after {used} round(s) back to '{result.step}': {result.reason}",
                )
            else:
                loop.gotos[result.step] = used + 1
                status, goto_target, next_seq = "goto", result.step, names.index(result.step)
    except (EnvironmentFailure, BudgetExhausted, KeyboardInterrupt) as exc:
        failure = failure_from(exc, name)
        ctx.emit(StepEnd(step=name, status="failed", duration_s=clock() - t0, failure=failure))
        raise
    except Exception as exc:  # noqa: BLE001 - every step failure becomes feedback
        failure = failure_from(exc, name)
        try:  # a full disk is the environment's: every step that writes is covered here, not case by case
            check_disk_full(f"{failure.message}\n{failure.log_tail}", f"the {name} step",
                            [*getattr(workflow, "disk_folders", ()), session_dir])
        except EnvironmentFailure as full:
            failure = failure.model_copy(update={"error_type": ErrorType.ENV})
            ctx.emit(StepEnd(step=name, status="failed", duration_s=clock() - t0, failure=failure))
            raise full from exc
    if failure is not None:
        if name == workflow.feedback_step:
            ctx.emit(StepEnd(step=name, status="failed", duration_s=clock() - t0, failure=failure))
            raise EnvironmentFailure(f"the feedback step failed: {failure.message}")
        loop.failure = failure
        status, next_seq = "failed", names.index(workflow.feedback_step)
    took = clock() - t0
    loop.running_s += took  # the loop's duration is the sum of its steps' (never a resume's gap)
    return StepOutcome(name=name, seq=seq, next_seq=next_seq, status=status, took=took, failure=failure,
                       goto=goto_target)
