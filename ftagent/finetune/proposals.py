"""The proposals of K trials at once (issue 41): distinct, each told what the others run, asked K at once.

One trial at a time, a proposal is ``Proposer.propose(trace, ctx)`` as before. With trials at once
(a context with ``peers()``, :class:`ftagent.engine.parallel.TrialContext`), :meth:`Proposals.next`:

* asks a proposer that can (``propose_batch(trace, ctx, n=, running=)``) for one proposal per trial that is
  about to propose (itself and the peers still at their first step) in one call, told the hypotheses the
  running trials test; the extra ones wait in a queue for those peers, and are dropped when the trace
  changed meanwhile (a finished trial's feedback: later proposals must see it);
* never starts a recipe a running trial (or an earlier proposal of the batch) already runs: such a proposal
  is skipped; when the batch holds none other, the proposer is asked once more for one, told all of them.

Propose steps run one at a time (the workflow's ``serial_steps``), so the queue needs no lock.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ftagent.core.trace import Trace
from ftagent.core.types import Hypothesis
from ftagent.engine.events import Message


def recipe_key(h: Hypothesis) -> str:
    """What makes two proposals the same experiment: the recipe when the planner wrote one (the offline
    planner), else the hypothesis and task in normalised words (an LLM's)."""
    recipe = h.plan.get("recipe") if h.plan else None
    if recipe:
        return json.dumps(recipe, sort_keys=True) + f"|skip={h.skip_data_processing}|{h.plan.get('data_note', '')}"
    return re.sub(r"\W+", " ", f"{h.hypothesis} {h.task}".lower()).strip()


def _version(trace: Trace) -> tuple[int, int | None]:
    return len(trace.experiments), trace.sota_loop


class Proposals:
    """Hands out the proposals of a round (see the module docstring)."""

    def __init__(self) -> None:
        self._queue: list[tuple[tuple[int, int | None], Hypothesis]] = []

    def next(self, proposer: Any, trace: Trace, ctx: Any) -> Hypothesis:
        peers = ctx.peers() if hasattr(ctx, "peers") else None
        if peers is None:  # one trial at a time
            return proposer.propose(trace, ctx)  # type: ignore[no-any-return]
        running = [p.hypothesis for p in peers if getattr(p, "hypothesis", None) is not None]
        taken = {recipe_key(h) for h in running}
        version = _version(trace)
        while self._queue:
            queued_version, h = self._queue.pop(0)
            if queued_version == version and recipe_key(h) not in taken:
                return h
        waiting = sum(1 for p in peers if getattr(p, "hypothesis", None) is None and p.next_step == 0)
        batch = getattr(proposer, "propose_batch", None)
        if batch is None:
            h = proposer.propose(trace, ctx)
            if recipe_key(h) in taken:
                ctx.emit(Message(level="warning", text="this proposal repeats a running trial's: the proposer cannot "
                                                       "be told what runs (it has no propose_batch)"))
            return h  # type: ignore[no-any-return]
        fresh = self._distinct(batch(trace, ctx, n=1 + waiting, running=running), taken)
        if not fresh:  # every one repeated a running recipe: ask once more, told all of them
            again = batch(trace, ctx, n=1, running=running + list(self._last))
            fresh = self._distinct(again, taken) or list(again[:1])
            if recipe_key(fresh[0]) in taken:
                ctx.emit(Message(level="warning", text="the proposer repeated a running trial's recipe twice: "
                                                       "running it anyway"))
        self._queue = [(version, h) for h in fresh[1:]]
        return fresh[0]

    def _distinct(self, batch: list[Hypothesis], taken: set[str]) -> list[Hypothesis]:
        self._last = list(batch)
        out: list[Hypothesis] = []
        seen = set(taken)
        for h in batch:
            key = recipe_key(h)
            if key not in seen:
                out.append(h)
                seen.add(key)
        return out
