"""The SOTA rule (``FT_SOTA_RULE``), its one owner: when does a candidate replace the current best.

* ``interval`` (default): the candidate becomes SOTA only when the lower bound of the paired bootstrap
  interval (:mod:`ftagent.core.stats`) of its validation difference -- on validation's selection part, which
  no planner sees, in a session that splits validation (:mod:`ftagent.core.holdout`, issue 39 item 5; the
  whole split where the metric is not a mean over items) -- against the SOTA (or the baseline
  while there is no SOTA) is above 0, or above ``FT_SOTA_MIN_DELTA`` when that is > 0. A zero-gain
  candidate (the same model again: every item paired with itself) has the interval [0, 0] and never
  wins; a gain within the noise of 100 items does not either. With K trials at once (``Trace.family_size``
  > 1) the candidates judged against one incumbent form rounds of K, and Holm's step-down procedure over
  each round keeps the chance of a false winner at 2.5 % for the round, not for each candidate
  (:mod:`ftagent.core.sota_family`); a round of one is the rule above.
* ``delta``: the point difference must exceed ``FT_SOTA_MIN_DELTA`` (:func:`ftagent.core.trace.beats`); it
  has no error control, for one candidate or for K.

When no interval can be computed (per-item scores missing, items that cannot be paired by id, a core
metric that is not a mean over items) the ``interval`` rule falls back to the ``delta`` rule and its
text says so. A failed experiment never wins, nor one the integrity guard flagged (``integrity_flags``),
nor one the forgetting guard blocked (``forgetting``, :mod:`ftagent.core.forgetting_rule`). The workflow, the
heuristic and LLM feedback and the prompt preview all call :func:`decide_sota`; :func:`differences`
computes the intervals every view shows.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from ftagent.core.forgetting_rule import blocking
from ftagent.core.sota_family import Judgment, distribution, gains, holm_step_down
from ftagent.core.stats import Difference, load_items, paired_bootstrap, signed
from ftagent.core.trace import Experiment, Trace, beats

SotaRule = Literal["interval", "delta"]
SOTA_RULES = ("interval", "delta")


class SotaDecision(BaseModel):
    """The numeric decision on one experiment and the line that explains it."""

    decision: bool
    rule: str  # the rule that decided: "interval" | "delta" | "failed" | "integrity" | "forgetting"
    text: str
    difference: Difference | None = None  # validation, against the incumbent
    judgment: Judgment | None = None  # against whom, in which round (a candidate with a score that was judged)


def _score(value: float | None) -> str:
    return "none" if value is None else f"{value:.4g}"


def _reference(trace: Trace) -> tuple[str, str]:
    """``(against, name)`` of the incumbent: the SOTA loop, else the baseline."""
    return ("SOTA", f"loop {trace.sota_loop}") if trace.sota() is not None else ("baseline", "the baseline")


def scored(holder: Experiment | None, trace: Trace, split: str) -> tuple[float | None, str | None]:
    """``(score, per-item record)`` of an experiment (None: the baseline) on ``split``: validation, test, or a
    validation part (selection, feedback; :mod:`ftagent.core.holdout`)."""
    if split in ("selection", "feedback"):
        part = (holder.parts if holder is not None else trace.baseline_parts).get(split)
        return (part.score, part.items) if part is not None else (None, None)
    if holder is None:
        return (trace.baseline_val, trace.baseline_val_items) if split == "validation" else (
            trace.baseline_test, trace.baseline_test_items)
    return (holder.val_score, holder.val_items) if split == "validation" else (holder.test_score, holder.test_items)


def deciding_split(experiment: Experiment, trace: Trace) -> str:
    """``selection`` when the session splits validation and both the candidate and its incumbent have the
    selection part's scores (issue 39 item 5: it alone decides); else ``validation`` (a metric that is not a
    mean over items cannot be split by item, and a session recorded before the split has none)."""
    if trace.holdout is None:
        return "validation"
    sota = trace.sota()
    incumbent = sota if sota is not None and sota.loop != experiment.loop else None
    ok = scored(experiment, trace, "selection")[1] and scored(incumbent, trace, "selection")[1]
    return "selection" if ok else "validation"


def differences(experiment: Experiment, trace: Trace) -> list[Difference]:
    """Candidate − baseline and candidate − SOTA (while there is a SOTA other than this loop), on
    validation, on its selection and feedback parts (a session that splits it) and on test, each with its
    interval or the reason it has none."""
    out: list[Difference] = []
    sota = trace.sota()
    if sota is not None and sota.loop == experiment.loop:
        sota = None
    splits = ["validation", *(["selection", "feedback"] if trace.holdout is not None else []), "test"]
    for split in splits:
        own, mine = scored(experiment, trace, split)
        if own is None:
            continue
        cand = load_items(mine)
        refs = [("baseline", "the baseline", None)] + ([("SOTA", f"loop {sota.loop}", sota)] if sota is not None else [])
        for against, name, holder in refs:
            score, path = scored(holder, trace, split)
            diff = None if score is None else own - score
            out.append(paired_bootstrap(cand, load_items(path), against=against, split=split, reference_name=name,
                                        diff=diff))
    return out


def incumbent_difference(experiment: Experiment, trace: Trace) -> Difference | None:
    """The deciding split's difference against the incumbent (SOTA, else baseline): from the experiment's
    recorded ``intervals`` when they hold it, else computed now."""
    against, _ = _reference(trace)
    split = deciding_split(experiment, trace)
    for diff in experiment.intervals:
        if diff.split == split and diff.against == against:
            return diff
    found = [d for d in differences(experiment, trace) if d.split == split and d.against == against]
    return found[0] if found else None


def decide_sota(experiment: Experiment, trace: Trace, *, rule: str = "interval",
                min_delta: float = 0.0) -> SotaDecision:
    """Whether ``experiment`` replaces the incumbent under ``rule`` (see the module docstring)."""
    if experiment.failure is not None:
        f = experiment.failure
        return SotaDecision(decision=False, rule="failed", text=f"Loop failed at {f.stage} ({f.error_type.value}).")
    if experiment.val_score is None:
        return SotaDecision(decision=False, rule="failed", text="No validation score, so it cannot become the best.")
    if experiment.integrity_flags:  # the integrity guard (ftagent.integrity): no score outweighs it
        return SotaDecision(decision=False, rule="integrity",
                            text="Flagged by the integrity guard, so it cannot become the best: "
                                 + "; ".join(experiment.integrity_flags) + ".")
    forgot = blocking(experiment.forgetting)
    if forgot:  # the forgetting guard (ftagent.finetune.forgetting_guard): it ran because the score would win
        return SotaDecision(decision=False, rule="forgetting",
                            text="Kept from SOTA by the forgetting guard: " + "; ".join(r.text for r in forgot) + ".")
    if trace.sota_loop == experiment.loop:  # judged again after it was recorded: against what it replaced
        trace = trace.model_copy(update={"experiments": [e for e in trace.experiments if e.loop != experiment.loop],
                                         "sota_loop": experiment.parent})
    metric = trace.core_metric
    _, name = _reference(trace)
    split = deciding_split(experiment, trace)
    sota = trace.sota()
    own = scored(experiment, trace, split)[0]
    incumbent = scored(sota, trace, split)[0] if split != "validation" else trace.incumbent_score()
    what = _split_words(trace, split)
    head = f"{what} {metric} {_score(own)} vs {name} ({_score(incumbent)})"
    diff = incumbent_difference(experiment, trace) if incumbent is not None else None
    judgment = judgment_of(experiment, trace) if incumbent is not None else None
    if rule == "interval" and diff is not None and (bounds := diff.gain_bounds(trace.direction)) is not None:
        low, _high = bounds
        won = low > min_delta
        if judgment is not None and judgment.family_size > 1:  # K candidates at once: Holm over the round
            won, judgment = _holm(experiment, trace, judgment, min_delta)
        bar = "0" if min_delta <= 0 else f"FT_SOTA_MIN_DELTA = {min_delta:g}"
        verdict = ("a significant gain" if won else
                   f"not a significant gain (the interval's lower bound is not above {bar})")
        if judgment is not None and judgment.family_size > 1:
            before = [e.loop for e in round_members(experiment, trace, judgment)]
            verdict = (("a significant gain" if won else f"not a significant gain (not above {bar})")
                       + f" under {judgment.text(experiment.loop, before)}")
        return SotaDecision(decision=won, rule="interval", difference=diff, judgment=judgment,
                            text=f"{head}: {diff.text()}: {verdict}.")
    won = beats(own, incumbent, trace.direction, min_delta)
    why = ""
    if rule == "interval" and incumbent is not None:
        reason = diff.no_interval if diff is not None else "no per-item scores"
        why = f" No interval ({reason}), so the delta rule decides."
    shown = f" ({signed(diff.diff)})" if diff is not None and diff.diff is not None else ""
    score = f"{what} {metric} {_score(own)}"
    if incumbent is None:
        text = f"{score}: nothing to beat yet."
    else:
        text = (f"{score} {'beats' if won else 'does not beat'} {name} ({_score(incumbent)}) by more than "
                f"FT_SOTA_MIN_DELTA = {min_delta:g}{shown}.{why}")
    return SotaDecision(decision=won, rule="delta", difference=diff, judgment=judgment, text=text)


def _split_words(trace: Trace, split: str) -> str:
    """How the verdict names what decided: the selection part, or validation (and why, in a split session)."""
    if split == "selection" and trace.holdout is not None:
        return f"Selection part ({trace.holdout.size('selection')} validation items never shown to the planner)"
    if trace.holdout is not None:
        return "Validation (the selection part cannot be scored alone: no per-item scores that average to the metric)"
    return "Validation"


def judgment_of(experiment: Experiment, trace: Trace) -> Judgment:
    """The candidate's place: its incumbent, its round and its order (see :mod:`ftagent.core.sota_family`).

    A candidate judged before (``experiment.judged``, read again by a view) keeps its recorded place; a new
    one joins the newest round against the current incumbent while that round has room, else opens the next.
    """
    if experiment.judged is not None:
        return experiment.judged
    others = [e.judged for e in trace.experiments if e.judged is not None and e.loop != experiment.loop]
    against = sorted((j for j in others if j.incumbent == trace.sota_loop), key=lambda j: j.order)
    size = max(1, trace.family_size)
    family = 0
    if against:
        last = against[-1]
        members = sum(1 for j in against if j.family == last.family)
        family, size = (last.family, last.family_size) if members < last.family_size else (last.family + 1, size)
    return Judgment(incumbent=trace.sota_loop, order=len(others), family=family, family_size=size)


def round_members(experiment: Experiment, trace: Trace, judgment: Judgment) -> list[Experiment]:
    """The candidates of ``judgment``'s round judged before this one."""
    return [e for e in trace.experiments
            if e.loop != experiment.loop and e.judged is not None and e.judged.incumbent == judgment.incumbent
            and e.judged.family == judgment.family and e.judged.order < judgment.order]


def _holm(experiment: Experiment, trace: Trace, judgment: Judgment, bar: float) -> tuple[bool, Judgment]:
    """Holm's step-down over the round (:func:`ftagent.core.sota_family.holm_step_down`)."""
    holder = trace.get(judgment.incumbent) if judgment.incumbent is not None else None
    split = deciding_split(experiment, trace)  # the selection part in a split session (issue 39 item 5)
    ref = scored(holder, trace, split)[1] if judgment.incumbent is None or holder is not None else None
    found = distribution(scored(experiment, trace, split)[1], ref)
    if isinstance(found, str):  # cannot happen when the interval exists (same records); decide nothing then
        return False, judgment
    members = []
    for other in round_members(experiment, trace, judgment):
        theirs = distribution(scored(other, trace, split)[1], ref)
        members.append(gains(theirs[1], trace.direction) if not isinstance(theirs, str) else [bar])  # p = 1
    mine = gains(found[1], trace.direction)
    won, rank, tail = holm_step_down(mine, members, family_size=judgment.family_size, bar=bar)
    p = sum(1 for g in mine if g <= bar) / len(mine)
    return won, judgment.model_copy(update={"rank": rank, "tail": tail, "p": round(p, 6)})
