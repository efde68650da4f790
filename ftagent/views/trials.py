"""The trials of a session as the report and the UI show them (issue 41): a tree and the busy fraction.

* :func:`trial_tree` — parent → children: each loop under the loop it built on (its hypothesis's parent,
  the SOTA when it was proposed; the baseline at the root), with the slot it ran on and its verdict.
* :func:`busy_fraction` — the seconds any slot trained or evaluated ÷ (slots × the trials' wall time): the
  trials' tool commands that use the accelerator (``run`` events of training — the validator's micro-batch
  and template check included — and evaluation: everything but the data scripts and the tracker,
  :func:`ftagent.runners.base.tool_uses_gpu`) summed over all trials (one trial per slot at a time, so a
  slot's seconds never count twice), over the slots times the time from the first trial step to the last
  step end of each run (a resume's gap and the scenario before loop 0 are not counted). One trial at a
  time is one slot: the fraction then says how much of the loops' time the accelerator worked.
"""

from __future__ import annotations

from pydantic import BaseModel

from ftagent.core.durations import format_duration
from ftagent.views.session_view import LoopView, SessionView

IDLE_PURPOSES = ("data", "data_debug", "track")  # run purposes (runners.recording.purpose_of) off the accelerator


class Busy(BaseModel):
    """How busy the slots were."""

    fraction: float | None = None
    busy_s: float = 0.0
    slots: int = 1
    wall_s: float = 0.0

    def text(self, gpu: bool) -> str:
        if self.fraction is None:
            return ""
        what = "GPU busy fraction" if gpu else "busy fraction (CPU slots)"
        return (f"{what}: {self.fraction:.2f} (training + evaluation {format_duration(self.busy_s)} on "
                f"{self.slots} slot(s) ÷ ({self.slots} × {format_duration(self.wall_s)} of trials))")


def busy_fraction(view: SessionView) -> Busy:
    """See the module docstring; ``fraction`` None before any trial step ended."""
    spans: list[tuple[float, float]] = []
    busy = 0.0
    for lp in view.loops:
        spans += [(st.started, st.started + st.duration_s) for st in lp.steps
                  if st.started is not None and st.duration_s is not None]
        busy += sum(float(run.get("duration_s") or 0.0) for run in lp.runs if run.get("purpose") not in IDLE_PURPOSES)
    if not spans:
        return Busy(slots=view.slot_count)
    wall = 0.0
    bounds = view.run_bounds or [(min(a for a, _ in spans), max(b for _, b in spans))]
    for start, end in bounds:
        mine = [(a, b) for a, b in spans if start <= a <= end]
        if mine:
            wall += max(b for _, b in mine) - min(a for a, _ in mine)
    slots = max(1, view.slot_count)
    fraction = min(1.0, busy / (slots * wall)) if wall > 0 else None
    return Busy(fraction=None if fraction is None else round(fraction, 4), busy_s=round(busy, 1), slots=slots,
                wall_s=round(wall, 1))


def _label(lp: LoopView) -> str:
    score = "–" if lp.val_score is None else f"{lp.val_score:.4g}"
    verdict = {True: "new best", False: "not best", None: lp.status}[lp.decision]
    slot = f" [{lp.slot}]" if lp.slot else ""
    return f"loop {lp.index}{slot}: val {score}, {verdict}"


def trial_tree(view: SessionView) -> list[str]:
    """The loops as a tree, parent → children (the module docstring), one line each."""
    children: dict[int | None, list[LoopView]] = {}
    known = {lp.index for lp in view.loops}
    for lp in view.loops:
        parent = (lp.hypothesis or {}).get("parent")
        children.setdefault(parent if parent in known else None, []).append(lp)
    lines = ["baseline"]

    def walk(parent: int | None, prefix: str) -> None:
        kids = children.get(parent, [])
        for i, lp in enumerate(kids):
            last = i == len(kids) - 1
            lines.append(f"{prefix}{'└─' if last else '├─'} {_label(lp)}")
            walk(lp.index, prefix + ("   " if last else "│  "))

    walk(None, "")
    return lines
