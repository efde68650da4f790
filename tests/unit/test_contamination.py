"""Contamination scan: planted benchmark items are caught, unrelated rows are not."""

from __future__ import annotations

import pytest

from ftagent.core.errors import ErrorType, StepError
from ftagent.datasets.contamination import check_contamination, items_from_records, normalise, scan_rows
from ftagent.datasets.demo_add import generate_rows

ITEMS = {
    "test/7": "Let $x$ be the number of ordered pairs of positive integers whose product is 3600 and whose "
              "sum is divisible by 7. Find the remainder when $x$ is divided by 1000.",
    "validation/2": "A frog jumps along the integer line starting at zero and each jump is one or two units; "
                    "how many ways can it reach exactly ten?",
}


def test_normalise():
    assert normalise("What is 12 + 45?") == ["what", "is", "12", "plus", "45"]  # operators as words (issue 39)
    assert normalise("Ｆｉｎｄ  X") == ["find", "x"]
    assert normalise("经济师") == ["经", "济", "师"]


def test_planted_item_is_caught_and_reported_without_its_text():
    rows = generate_rows(50, seed=2)
    planted = "Please solve: let x be the number of ordered pairs of positive integers whose product is 3600 " \
              "and whose sum is divisible by 7. Find the remainder when x is divided by 1000!"
    rows.insert(17, {"instruction": planted, "input": "", "output": "\\boxed{12}"})
    with pytest.raises(StepError) as info:
        check_contamination(rows, ITEMS)
    err = info.value
    assert err.error_type is ErrorType.DATA
    assert "row 17" in err.log_tail and "test/7" in err.log_tail
    assert "3600" not in err.message + err.log_tail + str(err.details)
    assert err.to_failure("code").error_type is ErrorType.DATA


def test_unrelated_rows_pass():
    rows = [{"instruction": "Find the remainder when 2^10 is divided by 7.", "input": "", "output": "2"},
            {"instruction": "Let x be the number of apples. Find x.", "input": "", "output": "3"}]
    report = check_contamination(rows + generate_rows(100, seed=0), ITEMS)
    assert report.flagged == [] and report.rows_checked == 102


def test_short_items_use_exact_match():
    bench = {"test/0": "What is 12 + 45?", "test/1": "What is 99 + 10?"}
    rows = [{"instruction": "What is 45 + 12?", "input": "", "output": "\\boxed{57}"},
            {"instruction": "what is 12+45", "input": "", "output": "\\boxed{57}"}]
    report = scan_rows(rows, bench)
    # issue 39: "45 + 12" asks the item "12 + 45" again (addition commutes): the template match's hit
    assert [(o.row_index, o.item_id) for o in report.flagged] == [(0, "test/0"), (1, "test/0")]
    assert check_contamination(rows, bench, max_flagged=2).flagged_rows == 2


def test_items_from_records():
    items = items_from_records([{"id": "a", "question": "Q1", "choices": ["x"]}, {"question": "Q2"}],
                               ["question"], prefix="test/")
    assert items == {"test/a": "Q1", "test/1": "Q2"}


def test_short_item_inside_a_longer_instruction_is_caught():
    from ftagent.datasets.contamination import scan_rows

    items = {"test:0": "What is 12 + 34?"}
    wrapped = {"instruction": "What is 12 + 34? Put the final answer in \\boxed{}.", "output": "\\boxed{46}"}
    other = {"instruction": "What is 12 + 35? Put the final answer in \\boxed{}.", "output": "\\boxed{47}"}
    report = scan_rows([other, wrapped], items)
    assert [o.row_index for o in report.flagged] == [1]
