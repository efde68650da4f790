"""math-verify scoring that a loaded machine cannot change, one details entry per item (issue 31 item 7,
issue 43).

Stock ``MATHVerifyEvaluator`` drops the details entry of an item whose gold does not parse, and
OpenCompass pairs details with rows by position (``BaseEvaluator.group``), so every later item took its
neighbour's verdict; math-verify's 5 s limits (and stock's 10 s process limit) turned a correct answer
wrong on a loaded machine, silently, and after issue 31's retry every wrong answer was retried under load
(its limits were wall-clock). Run in the tool env (``math_verify_score.py``).
"""

from __future__ import annotations

import pytest

from ftagent.benchmarks import get_benchmark
from ftagent.benchmarks.components import component_path
from ftagent.tools.opencompass import provides  # noqa: F401 (says where "@Name" components live)
from tests.parity.harness import HERE, run_in_tools

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def scored(tools_python):
    evaluator = component_path(get_benchmark("math").evaluator)
    return run_in_tools(tools_python, HERE / "math_verify_score.py",
                        {"evaluator": evaluator, "stock": "opencompass.evaluator:MATHVerifyEvaluator"}, timeout=300)


def test_every_item_keeps_its_details_entry_in_order(scored):
    stock = scored["stock_pairing"]
    assert len(stock["details"]) == 2  # stock's gap: the third item's verdict lands on the second row
    ours = scored["pairing"]
    assert [d["correct"] for d in ours["details"]] == [True, False, True]
    assert ours["details"][1]["skipped"] == "gold not parsable"
    assert ours["accuracy"] == pytest.approx(stock["accuracy"])  # the score is stock's


def test_a_verification_the_machine_stalls_is_no_timeout(scored):
    """Issue 43: under load every wrong AIME answer was retried, no right one: the wall clock ran out while the
    child did not compute (planted: 6 s asleep in the comparison). A right answer hid it (its string pair
    still matched); a wrong one was retried. The limits count CPU time: neither is a timeout now."""
    stalled = scored["stalled"]
    assert [d["correct"] for d in stalled["details"]] == [True, False] and stalled["accuracy"] == 50.0
    assert "verify_timeouts" not in stalled, stalled  # d350dfe: 1 (the wrong answer, retried)
    assert not any("verify_timeouts" in d for d in stalled["details"])


def test_a_verification_that_computes_past_the_limit_is_retried_wider_and_counted(scored):
    computing = scored["computing"]  # 2 s of computing per comparison; limits 1 s, then 5 s
    assert [d["correct"] for d in computing["details"]] == [True, False]
    assert computing["verify_timeouts"] == 1 and "verify_unresolved" not in computing
    assert computing["details"][1]["verify_timeouts"] == 1


def test_a_verification_that_never_finishes_is_wrong_flagged_and_counted(scored):
    out = scored["unresolved"]  # 2 s of computing per comparison; limits 1 s and 1 s
    assert out["accuracy"] == 50.0 and out["verify_timeouts"] == 1 and out["verify_unresolved"] == 1
    assert out["details"][1]["verify_timed_out"] is True and out["details"][1]["correct"] is False


def test_a_child_computing_past_the_process_limit_is_killed_by_its_cpu_time(scored):
    killed = scored["killed"]  # computes for an hour outside math-verify's limits; process limit 1 CPU s
    assert killed["accuracy"] == 0.0 and killed["verify_unresolved"] == 1
    assert killed["details"][0]["verify_timed_out"] is True
    assert killed["wall_s"] < 2 * 10 * 1.0  # two attempts, each at most its wall-clock cap


def test_math_verify_catching_its_own_timeout_counts_as_a_timeout(scored):
    caught = scored["caught"]
    assert caught["result"]["timeouts"] >= 1 and caught["timed_out"] is True
