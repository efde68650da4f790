"""No false winners across a round of candidates: Holm's procedure on the interval rule (issue 41).

One candidate against the incumbent (the SOTA, else the baseline) wins under ``FT_SOTA_RULE=interval``
when the lower end of its 95 % paired bootstrap interval is above the bar (0, or ``FT_SOTA_MIN_DELTA``):
a one-sided test at :data:`ALPHA` = 2.5 %. With K trials at once, K candidates are judged against the
same incumbent, and the chance that noise makes one of them a winner grows towards K × 2.5 %. The rule
keeps it at :data:`ALPHA` for the whole round with Holm's step-down procedure (Holm 1979; valid whatever
the dependence between the candidates, which all share the incumbent's items):

* a *round* (family) is up to ``Trace.family_size`` candidates (the session's slots, K) judged against
  one incumbent, in the order they are judged; a winner changes the incumbent, so the candidates judged
  after it start a new round against it;
* each candidate's one-sided bootstrap p-value (the share of resampled differences at or below the bar)
  orders the round; the i-th of a round of m (1-based) is accepted as a gain when its lower bound at the
  tail ``ALPHA / (m - i + 1)`` is above the bar and every candidate before it was accepted too;
* candidates of the round not judged yet count as p = 1 (last): a decision taken before the round is
  complete is one the complete procedure takes as well (Holm's rejections only grow as smaller p-values
  join), so the family-wise error stays at most :data:`ALPHA` whatever order the trials finish in;
* a round of one is the plain interval rule: the tail ``ALPHA`` is the interval's own lower end.

The bootstrap distributions are the seeded ones of :func:`ftagent.core.stats.bootstrap_distribution`
(the same numbers as the intervals every view shows), kept in a small cache by file and modification time.
``tests/unit/test_sota_family.py`` simulates 1,000 rounds of K = 4 candidates equal to the SOTA in truth.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from ftagent.core.stats import LEVEL, RESAMPLES, SEED, bootstrap_distribution, load_items, quantile

ALPHA = (1.0 - LEVEL) / 2  # the one-sided level of the interval rule: the 95 % interval's lower tail
_CACHE_MAX = 256
_cache: dict[tuple[object, ...], tuple[float, list[float], int] | str] = {}


class Judgment(BaseModel):
    """How one candidate was judged: against whom, in which round, at which tail (stored on the experiment)."""

    incumbent: int | None  # the SOTA loop it was judged against; None: the baseline
    order: int  # its place among the session's judgments (0, 1, 2 ...)
    family: int  # its round against that incumbent (0, 1 ...)
    family_size: int  # m: the candidates a round holds (the session's slots)
    rank: int | None = None  # its place in the round by p-value at judgment (1 = strongest evidence)
    tail: float | None = None  # the tail whose lower bound had to clear the bar (ALPHA / (m - rank + 1))
    p: float | None = None  # one-sided bootstrap p-value of "no gain above the bar" (None: no interval)

    def text(self, loop: int | None = None, before: list[int] | None = None) -> str:
        """``Holm over a round of 2 candidates judged against loop 0: loop 2 and loop 1 (judged before it); rank 1 of
        the round by its evidence of a gain, lower bound at the 1.25 % tail``.

        ``loop`` is the candidate, ``before`` the round's candidates judged before it (relay round r2: "Holm over a
        round of 2 candidates (rank 1 …)" under a one-experiment feedback left the reader asking which other
        candidate, and rank among what); a place not judged yet is said as such (it counts last)."""
        if self.family_size <= 1:
            return ""
        against = "the baseline" if self.incumbent is None else f"loop {self.incumbent}"
        who = ""
        if loop is not None:
            earlier = [f"loop {i}" for i in sorted(before or [])]
            pending = self.family_size - 1 - len(earlier)
            who = (f": loop {loop}" + (f" (judged before it: {', '.join(earlier)})" if earlier else "")
                   + (f", and {pending} not judged yet (counted last)" if pending > 0 else ""))
        where = (f"rank {self.rank} of the round by its evidence of a gain" if self.rank is not None
                 else "no interval")
        tail = f", lower bound at the {100 * self.tail:.3g} % tail" if self.tail is not None else ""
        return f"Holm over a round of {self.family_size} candidates judged against {against}{who}; {where}{tail}"


def gains(stats: list[float], direction: str) -> list[float]:
    """A sorted distribution of ``candidate − reference`` as gains in the metric's direction (ascending)."""
    return stats if direction != "min" else [-x for x in reversed(stats)]


def p_value(sorted_gains: list[float], bar: float) -> float:
    """The share of resampled gains at or below ``bar`` (one-sided bootstrap p-value)."""
    return sum(1 for g in sorted_gains if g <= bar) / len(sorted_gains) if sorted_gains else 1.0


def holm_step_down(candidate: list[float], members: list[list[float]], *, family_size: int, bar: float,
                   alpha: float = ALPHA) -> tuple[bool, int, float]:
    """Whether ``candidate`` wins in its round: ``(won, its rank, its tail)``.

    ``candidate`` and ``members`` (the round's candidates judged before it) are sorted gain
    distributions against the same incumbent; the round holds ``family_size`` candidates, those not
    judged yet count as p = 1. See the module docstring.
    """
    m = max(family_size, len(members) + 1)
    ranked = sorted([(p_value(g, bar), 0, i) for i, g in enumerate(members)] + [(p_value(candidate, bar), 1, -1)])
    for rank, (_p, _is_candidate, index) in enumerate(ranked, start=1):
        tail = alpha / (m - rank + 1)
        dist = candidate if index < 0 else members[index]
        accepted = quantile(dist, tail) > bar
        if index < 0:
            return accepted, rank, tail
        if not accepted:  # the step-down stops before reaching the candidate
            cand_rank = next(r for r, (_, _, i) in enumerate(ranked, start=1) if i < 0)
            return False, cand_rank, alpha / (m - cand_rank + 1)
    raise AssertionError("the candidate is always ranked")  # pragma: no cover


def distribution(candidate_items: str | None, reference_items: str | None, *, resamples: int = RESAMPLES,
                 seed: int = SEED) -> tuple[float, list[float], int] | str:
    """:func:`~ftagent.core.stats.bootstrap_distribution` of two per-item records on disk (cached), or why none."""
    key: tuple[object, ...] = (candidate_items, reference_items, _stamp(candidate_items), _stamp(reference_items),
                               resamples, seed)
    if key in _cache:
        return _cache[key]
    cand, ref = load_items(candidate_items), load_items(reference_items)
    found = ("per-item scores missing" if cand is None or ref is None
             else bootstrap_distribution(cand, ref, resamples=resamples, seed=seed))
    if len(_cache) >= _CACHE_MAX:
        _cache.pop(next(iter(_cache)))
    _cache[key] = found
    return found


def _stamp(path: str | None) -> tuple[int, int] | None:
    try:
        st = Path(path).stat() if path else None
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size) if st is not None else None
