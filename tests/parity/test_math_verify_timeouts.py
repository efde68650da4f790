"""math-verify scoring that a loaded machine cannot change, one details entry per item (issue 31 item 7).

Stock ``MATHVerifyEvaluator`` drops the details entry of an item whose gold does not parse, and
OpenCompass pairs details with rows by position (``BaseEvaluator.group``), so every later item took its
neighbour's verdict; math-verify's 5 s limits (and stock's 10 s process limit) turned a correct answer
wrong on a loaded machine, silently. Run in the tool env (``math_verify_score.py``).
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


def test_a_timed_out_verification_is_retried_wider_and_counted(scored):
    retried = scored["retried"]
    assert retried["accuracy"] == 100.0 and retried["verify_timeouts"] == 1
    assert "verify_unresolved" not in retried and retried["details"][0]["verify_timeouts"] == 1


def test_a_verification_that_never_finishes_is_wrong_flagged_and_counted(scored):
    out = scored["unresolved"]
    assert out["accuracy"] == 0.0 and out["verify_timeouts"] == 1 and out["verify_unresolved"] == 1
    assert out["details"][0]["verify_timed_out"] is True and out["details"][0]["correct"] is False


def test_math_verify_catching_its_own_timeout_counts_as_a_timeout(scored):
    caught = scored["caught"]
    assert caught["result"]["timeouts"] >= 1 and caught["timed_out"] is True
