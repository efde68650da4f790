"""Issue 35, relay round 4: what the planner was shown of a mixed raw file ("Add 11 to N." with one-, two-
and three-digit N, "What is N minus 11?", junk and duplicates) and of its loss curve."""

from __future__ import annotations

import json
from pathlib import Path

from ftagent.datasets.makeup import profile_rows
from ftagent.planners.llm.loss_words import loss_summary

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "loss_curves"


def _add11_rows() -> list[dict]:
    """9 one-digit, 60 two-digit and 300 three-digit N, the two-digit ones first (as the file had them:
    the samples, the group's first rows, were all two-digit)."""
    ns = list(range(20, 80)) + list(range(1, 10)) + list(range(100, 400))
    return [{"instruction": f"Add 11 to {n}.", "input": "", "output": f"Adding 11 to {n} gives {n + 11}."}
            for n in ns]


def test_the_view_gives_each_varying_numbers_range_and_digit_counts():
    view = profile_rows(_add11_rows()).to_markdown()
    # before: only the samples (N = 20, 21) hinted at N, which suggested two-digit N only
    assert '"Add 11 to N." → answers like "Adding 11 to N gives M." ×369; N: 1–399 (369 distinct; ' \
           "digits 1:9, 2:60, 3:300)" in view, view


def test_an_answer_number_gets_its_own_name_unless_it_equals_the_instructions():
    rows = [{"instruction": f"What is {n} minus 11?", "input": "", "output": str(n - 11)} for n in range(20, 80)]
    rows += [{"instruction": f"Repeat {n}.", "input": "", "output": str(n)} for n in range(20, 80)]
    rows += [{"instruction": f"Sum {a} and {b}.", "input": "", "output": f"{a} + {b} = {a + b}"}
             for a, b in zip(range(20, 80), range(50, 110), strict=True)]
    view = profile_rows(rows).to_markdown()
    assert '"What is N minus 11?" → answers like "M" ×60' in view, view  # before: "N", though N − 11 ≠ N
    assert '"Repeat N." → answers like "N" ×60' in view, view  # the answer really is N
    assert '"Sum N and M." → answers like "N + M = K" ×60' in view, view


def test_duplicates_are_exact_usable_repeats_and_no_row_counts_twice():
    junk = [{"instruction": "", "input": "", "output": "lorem"}] * 5 + [{"instruction": 7, "input": "", "output": "x"}] * 3
    good = [{"instruction": f"Add 11 to {n}.", "input": "", "output": str(n + 11)} for n in range(40)]
    rows = junk + good + good[:4] + good[:2]
    makeup = profile_rows(rows)
    assert makeup.duplicates == 6  # before: 12 (the repeated junk rows counted again as duplicates)
    distinct_usable = {json.dumps([r["instruction"], r["input"], r["output"]]) for r in good}
    assert makeup.rows - makeup.anomalies() == len(distinct_usable)  # each row in one count at most
    assert ("6 exact duplicates of an earlier row (same instruction, input and output; counted among the "
            "usable rows)") in makeup.to_markdown()


def test_the_relay_loop0_curve_flat_near_zero_is_levelling_off_not_still_falling_or_noisy():
    """Loop 0 of the relay play: 2.83 → 0.0003 at step 2,000, then 0.0002-0.0003 (the Trainer's 4-decimal
    rounding) to step 3,700; it was summarised "still falling at the end; noisy"."""
    history = json.loads((FIXTURES / "relay4_plus11_loop0.json").read_text(encoding="utf-8"))
    summary = loss_summary(history)
    assert summary is not None and summary.last == 0.0002 and summary.min_step < summary.last_step
    assert "levelling off" in summary.trend, summary.trend
    assert "still falling" not in summary.trend and "noisy" not in summary.trend, summary.trend
    # a curve still falling by more than rounding near zero is still called so, and real noise still noisy
    falling = [{"step": s, "loss": round(0.02 - 0.0009 * i, 4)} for i, s in enumerate(range(100, 2100, 100))]
    assert "still falling" in loss_summary(falling).trend
    noisy = [{"step": s, "loss": 2.0 / (i + 1) + (0.3 if i % 2 else 0.0)} for i, s in enumerate(range(100, 2100, 100))]
    assert "noisy" in loss_summary(noisy).trend
