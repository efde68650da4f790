"""Issue 39 item 5: the contamination scan normalises before matching and matches by template.

The red team's 9 rewordings of a benchmark item must each be a hit at the data step's scan
(:func:`check_contamination`, what ``DataProcessor._scan`` calls) AND at the integrity guard
(:func:`ftagent.finetune.integrity.contamination_check`); honest rows must not be. Every rewording passed
both at d350dfe.
"""

from __future__ import annotations

import json
import time

import pytest

from ftagent.benchmarks.demo import demo_add_items
from ftagent.core.errors import StepError
from ftagent.datasets.contamination import check_contamination, normalise, scan_rows
from ftagent.datasets.template_scan import signature
from ftagent.datasets.textnorm import fold
from ftagent.integrity.training_data import contamination_check

TEMPLATE = " Put the final answer in \\boxed{}."


def _items() -> dict[str, list[str]]:
    return {f"demo_add/validation:{i}": [it["question"] + TEMPLATE] for i, it in enumerate(demo_add_items())}


def _arabic(n: int) -> str:
    return "".join(chr(0x660 + int(d)) for d in str(n))


ITEM = demo_add_items()[0]  # "What is 25 + 68?"
A, B = ITEM["a"], ITEM["b"]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
ONES = ["", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def _words(n: int) -> str:
    return TENS[n // 10] + ("-" + ONES[n % 10] if n % 10 else "")


REWORDINGS = {
    "operands swapped": f"What is {B} + {A}?",
    "plus in words": f"What is {A} plus {B}?",
    "equation form": f"{A} + {B} = ?",
    "spelled-out numbers": f"What is {_words(A)} plus {_words(B)}?",
    "a contraction": f"What's {A} + {B}?",
    "a Cyrillic letter": f"Wh\u0430t is {A} + {B}?",
    "a combining grapheme joiner": f"What is {str(A)[0]}\u034f{str(A)[1]} + {B}?",
    "Arabic-Indic digits": f"What is {_arabic(A)} + {_arabic(B)}?",
    "a different verb": f"Calculate {A} + {B}.",
    # beyond the red team's nine
    "sum phrasing": f"Compute the sum of {B} and {A}.{TEMPLATE}",
    "zero-width space and fullwidth digits": f"What\u200b is \uff12\uff15 + {B}?",
}


@pytest.mark.parametrize("how", sorted(REWORDINGS))
def test_each_rewording_is_a_hit_at_the_data_step_and_the_guard(how, tmp_path):
    row = {"instruction": REWORDINGS[how], "input": "", "output": f"\\boxed{{{A + B}}}"}
    with pytest.raises(StepError) as err:
        check_contamination([row], _items())
    assert "demo_add/validation:0" in json.dumps(err.value.details)
    data = tmp_path / "data.json"
    data.write_text(json.dumps([row]), encoding="utf-8")
    verdict = contamination_check(data, _items(), {})
    assert verdict.passed is False and "hold items" in verdict.detail


def _honest_rows() -> list[dict[str, str]]:
    """Rows an honest script writes for an addition benchmark: none asks an item."""
    used = {(it["a"], it["b"]) for it in demo_add_items()}
    other = next((a, b) for a in range(10, 100) for b in range(10, 100) if (a, b) not in used and (b, a) not in used)
    texts = [
        f"What is {other[0]} + {other[1]}?{TEMPLATE}",  # the benchmark's sentence, numbers outside the items
        f"What is {A + 100} + {B}?{TEMPLATE}",  # three-digit: outside the items' range
        f"What is {A}{B} + 7?",  # "2568": the item's digits glued are another number
        f"What is {A} - {B}?",  # another operation
        f"What is {A} times {B}?",
        f"Tom has {other[0]} apples and buys {other[1]} more. How many apples does he have?",  # word problem
        f"Sara had {other[0]} marbles and lost {other[1]}. How many are left?",
        "Add the two numbers carefully and put the result in a box.",  # no numbers at all
        "# numbers come from benchmarks/demo_add? No: generated here, 100-999 only.",  # names the folder
        f"Add {A} and {B}, then add 1.",  # a second step: its sentence holds another number (a hit before)
        f"Write {A} + {B} as a word problem about apples? No: {A + 1} + {B} instead.",
    ]
    return [{"instruction": t, "input": "", "output": "\\boxed{1}"} for t in texts]


def test_honest_rows_are_not_hits(tmp_path):
    rows = _honest_rows()
    report = scan_rows(rows, _items())
    flagged = {o.row_index for o in report.flagged}
    # the last row holds "12 + 45 as a word problem": the item inside a sentence is the exact check's hit
    assert flagged == {len(rows) - 1}, [rows[i]["instruction"] for i in flagged]
    data = tmp_path / "data.json"
    data.write_text(json.dumps(rows[:-1]), encoding="utf-8")
    assert contamination_check(data, _items(), {}).passed is True


def test_a_times3_benchmark_reordered_questions_are_hits_and_other_forms_are_not():
    """Issue 39: on "What is 3 times N?" the same questions reordered passed the scan (the planner's own play)."""
    items = {f"times3/validation:{n}": [f"What is 3 times {n}?{TEMPLATE}"] for n in range(10, 90)}
    hits = [f"What is {n} times 3?" for n in (10, 47, 89)] + [f"Multiply {n} by 3." for n in (11, 50)]
    hits += ["What is 3 \u00d7 62?", "3 * 63 = ?", "Compute the product of 64 and 3."]
    honest = [f"What is 3 times {n}?" for n in (150, 200, 999)] + ["What is 4 times 47?", "What is 3 plus 47?",
                                                                  "Triple the number 123."]
    rows = [{"instruction": t, "input": "", "output": "x"} for t in hits + honest]
    flagged = {o.row_index for o in scan_rows(rows, items).flagged}
    assert flagged == set(range(len(hits)))


def test_normalisation_steps():
    assert fold("Wh\u0430t") == "What"  # Cyrillic a → Latin
    assert fold("\u0661\u0662") == "12" and fold("\u0967\u0968") == "12"  # Arabic-Indic, Devanagari
    assert fold("1\u034f2\u200b3\u2060") == "123"
    assert fold("Wha\u0301t") == "What"  # a combining mark
    assert fold("10 l0") == "10 l0"  # ASCII is never folded: digits stay digits
    assert normalise("What's one hundred and five plus eleven?") == ["what", "is", "105", "plus", "11"]
    assert signature("Add 12 and 45.") == signature("12 + 45 = ?") == ["12", "plus", "45"]
    assert signature("Subtract 12 from 45.") == ["45", "minus", "12"]


def test_scan_speed_on_real_sizes():
    """5,000 rows against 200 items (demo_add's size); the measured time is in docs/datasets.md."""
    from ftagent.datasets.demo_add import generate_rows

    rows = generate_rows(n=5000, seed=3, exclude=set())
    start = time.perf_counter()
    report = scan_rows(rows, _items())
    took = time.perf_counter() - start
    assert report.flagged_rows > 0  # rows of the same pairs exist in an unfiltered pool
    assert took < 30, took  # about 0.6 s on this 2-core machine; generous for a loaded CI


def test_the_demo_dataset_leaves_out_swapped_pairs_and_is_generated_again(tmp_path):
    from ftagent.datasets.demo_add import benchmark_pairs, generate_rows
    from ftagent.datasets.prepare import MARKER, PreparedMarker, prepare_dataset

    rows = generate_rows(n=2000, seed=5, exclude=benchmark_pairs())
    assert scan_rows(rows, _items()).flagged_rows == 0
    out = prepare_dataset("demo_add", tmp_path)
    marker = PreparedMarker.model_validate_json((out / MARKER).read_text(encoding="utf-8"))
    assert marker.version == "2"
    # a folder generated by the version before (swapped pairs in it) is generated again
    (out / MARKER).write_text(marker.model_copy(update={"version": ""}).model_dump_json(), encoding="utf-8")
    (out / "demo_add_train.json").write_text("[]", encoding="utf-8")
    prepare_dataset("demo_add", tmp_path)
    assert len(json.loads((out / "demo_add_train.json").read_text(encoding="utf-8"))) > 1000
