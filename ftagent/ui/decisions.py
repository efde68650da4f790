"""Why a loop became the best or did not, and what the base model's score means: the UI side of the
report's view-model (:class:`~ftagent.views.report.Report`, :func:`~ftagent.views.report.sota_rows`,
:func:`~ftagent.views.report.baseline_rows`). The UI draws; it recomputes nothing, so the page and
report.md say the same (issue 31 follow-up).
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from ftagent.views.report import LoopRow, Report, baseline_rows, sota_row, sota_rows


def show_baselines(r: Report) -> None:
    """The base model beside a constant answer (validation / test), when the session recorded one."""
    if not r.constant_baseline:
        return
    st.markdown("**Baselines**: the base model beside what one constant answer scores")
    st.table(pd.DataFrame(baseline_rows(r)).set_index(""))
    val = r.constant_baseline.get("validation")
    if val is not None and val.line:
        st.caption(f"Trivial baseline: {val.line}; a score near it is no sign of skill.")


def show_decisions(r: Report) -> None:
    """One row per judged loop: validation score, its difference with the 95 % paired interval against
    the best it was judged against, whether it became the best and why; each integrity flag in full."""
    rows = [row for row in sota_rows(r) if row.became_best is not None]
    if not rows:
        return
    st.markdown("**Best-model decisions** (FT_SOTA_RULE; differences: 95 % paired bootstrap interval, "
                "docs/benchmarks.md, Intervals)")
    st.table(pd.DataFrame([row.cells() for row in rows]).set_index("loop"))
    for row in rows:
        for flag in row.flags:
            st.warning(f"Loop {row.loop} flagged by the integrity guard, not eligible as best: {flag}")


def decision_mark(row: LoopRow) -> str:
    """A loop title's tail: ``· new best (significant gain)``, ``· not best (not significant)``, ``· pending``."""
    if row.decision is None:
        return "· pending"
    why = sota_row(row).why
    return ("· new best" if row.decision else "· not best") + (f" ({why})" if why else "")


def show_loop_decision(row: LoopRow) -> None:
    """A loop's verdict line and the integrity guard's checks on it."""
    if row.verdict:
        st.markdown(f"**Decision**: {row.verdict}")
    if row.integrity is not None:
        flagged = [c for c in row.integrity if c.get("passed") is False]
        st.markdown(f"**Integrity guard**: {len(row.integrity)} check(s), "
                    + (f"{len(flagged)} flagged: not eligible as best" if flagged else "clean"))
        st.table(pd.DataFrame([{"check": c.get("name"), "verdict": {True: "passed", False: "FLAGGED",
                                                                    None: "n/a"}[c.get("passed")],
                                "detail": c.get("detail") or ""} for c in row.integrity]))
