"""Relay round r2's critique (/work/relay/r2/critique.md), acted on after the round: each finding checked through
the code that renders the prompt or ends the session (docs/llm.md "Sixth and seventh relay rounds")."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from ftagent.core.slots import Slot
from ftagent.engine.loop import LoopEngine
from ftagent.engine.parallel import LocalSlotPool
from ftagent.engine.session import Session
from ftagent.finetune.saturation import first_guard, saturation_guard
from tests.unit._workflows import RecordingWorkflow, TraceState


class _ScoredWorkflow(RecordingWorkflow):
    """Loop ``i`` scores ``scores[i]`` on validation (the base workflow scores ``float(loop)``)."""

    def __init__(self, scores: dict[int, float], **kw) -> None:
        super().__init__(**kw)
        self.scores = scores

    def _make(self, name: str):
        inner = super()._make(name)
        if name != "feedback":
            return inner

        def step(ctx):
            out = inner(ctx)
            exp = ctx.state.trace.get(ctx.loop.index)
            exp.val_score = self.scores.get(ctx.loop.index, 1.0)
            if exp.loop == 0 or exp.val_score > (ctx.state.trace.incumbent_score() or 0.0):
                ctx.state.trace.sota_loop = exp.loop
            return out

        return step


def _session(tmp_path: Path, loop_n: int) -> Session:
    session = Session.create(tmp_path / "log", {"run": {"loop_n": loop_n}}, state_cls=TraceState)
    session.state.trace.core_metric = "accuracy"
    return session


def _ends(session: Session) -> list[dict]:
    import json

    lines = (session.dir / "events.jsonl").read_text(encoding="utf-8").splitlines()
    return [e for e in map(json.loads, lines) if e.get("type") == "session_end"]


def test_a_best_at_the_maximum_ends_the_session_saturated_one_loop_at_a_time(tmp_path: Path) -> None:
    """r2: loop 0 scored 100 % and loops 1-3 still ran, none able to become the best (a tie keeps the best). The
    session now starts no loop after a best at the metric's maximum: it ends ``saturated``, says why and how many
    loops it did not start, and the finish step (the final evaluation) still runs. Before the fix the engine had no
    such guard: all 5 loops ran and the session ended ``completed``."""
    finished: list[bool] = []
    session = _session(tmp_path, 5)
    wf = _ScoredWorkflow({0: 40.0, 1: 100.0, 2: 100.0})
    guard = first_guard(partial(saturation_guard, loop_n=5), lambda ctx: None)
    summary = LoopEngine(wf, session, loop_n=5, loop_guard=guard, finish=lambda ctx: finished.append(True)).run()
    assert (summary.status, summary.loops_done) == ("saturated", 2)
    assert finished == [True]
    assert summary.message == ("stopped early: loop 1, the best, scores the metric's maximum on validation (100.0 % "
                               "accuracy), so no later loop can replace it (the best rule needs a gain over the best; "
                               "a tie keeps it); 3 of the 5 loops (--loop-n) were not started")
    assert [e["status"] for e in _ends(session)] == ["saturated"]
    assert {i for i, _ in wf.calls} == {0, 1}


def test_below_the_maximum_or_without_one_every_loop_runs(tmp_path: Path) -> None:
    """99.9 % is not the maximum, and a metric with no known maximum (a loss to minimise) never stops a session."""
    wf = _ScoredWorkflow({0: 99.9, 1: 99.9, 2: 99.9})
    summary = LoopEngine(wf, _session(tmp_path / "a", 3), loop_n=3,
                         loop_guard=partial(saturation_guard, loop_n=3)).run()
    assert (summary.status, summary.loops_done) == ("completed", 3)
    session = _session(tmp_path / "b", 3)
    session.state.trace.core_metric, session.state.trace.direction = "eval_loss", "min"
    wf = _ScoredWorkflow({0: 100.0, 1: 100.0, 2: 100.0})
    summary = LoopEngine(wf, session, loop_n=3, loop_guard=partial(saturation_guard, loop_n=3)).run()
    assert (summary.status, summary.loops_done) == ("completed", 3)


def test_k_trials_at_once_finish_the_loops_in_flight_then_end_saturated(tmp_path: Path) -> None:
    """With 2 trials at once loop 1 runs beside loop 0; once loop 0 scores 100 % no further loop starts, loop 1
    finishes and is judged, and the session ends ``saturated`` (not ``timeout``, the other guard's status)."""
    session = _session(tmp_path, 6)
    wf = _ScoredWorkflow({0: 100.0, 1: 80.0}, plan={(1, "train"): "sleep:1.0"})
    summary = LoopEngine(wf, session, loop_n=6, loop_guard=partial(saturation_guard, loop_n=6),
                         pool=LocalSlotPool([Slot(index=i) for i in range(2)])).run()
    assert summary.status == "saturated", summary.message
    assert summary.loops_done == 2 and {i for i, _ in wf.calls} == {0, 1}
    assert (1, "feedback") in wf.calls  # the loop in flight was finished, not abandoned
    assert "4 of the 6 loops (--loop-n) were not started" in summary.message


def test_a_saturated_session_exits_0() -> None:
    """It has a scored model: the CLI exits 0 (docs/reliability.md, "Exit codes")."""
    from types import SimpleNamespace as NS

    from ftagent.cli.run import exit_for

    exit_for(NS(status="saturated", message="stopped early"))  # raises typer.Exit for a non-zero ending

