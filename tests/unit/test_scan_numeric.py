"""Issue 39, red team B3 and its false flags: a numeric item is its numbers and its gold, in any wording
(:mod:`ftagent.datasets.numeric_scan`); numbers are read whole (a sign and a decimal part stay on the number); an
item inside a longer expression is another question; a training set that answers a large share of a small
templated input space is flagged; honest variations are not.

Every call passes the items' gold answers, as both real callers do (the data step's ``DataProcessor.scan`` and the
guard's ``contamination_check`` read them from the benchmark folder).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from ftagent.benchmarks.demo import demo_add_items
from ftagent.core.errors import StepError
from ftagent.datasets.contamination import check_contamination, scan_rows
from ftagent.integrity.training_data import contamination_check

TEMPLATE = " Put the final answer in \\boxed{}."
ITEMS = demo_add_items()
ITEM = ITEMS[0]  # "What is 25 + 68?" -> 93
A, B, GOLD = ITEM["a"], ITEM["b"], ITEM["a"] + ITEM["b"]
USED = {frozenset((it["a"], it["b"])) for it in ITEMS}


def _items() -> dict[str, list[str]]:
    return {f"demo_add/validation:{i}": [it["question"] + TEMPLATE] for i, it in enumerate(ITEMS)}


def _answers() -> dict[str, str]:
    return {f"demo_add/validation:{i}": it["answer"] for i, it in enumerate(ITEMS)}


def _row(question: str, answer: str) -> dict[str, str]:
    return {"instruction": question, "input": "", "output": answer}


def _guard(rows: list[dict], tmp_path: Path, items=None, answers=None):
    data = tmp_path / "data.json"
    data.write_text(json.dumps(rows), encoding="utf-8")
    return contamination_check(data, items or _items(), answers or _answers())


def _other_pair() -> tuple[int, int]:
    return next((a, b) for a in range(10, 100) for b in range(10, 100) if frozenset((a, b)) not in USED)


# -- honest variations: none is a hit at the data step or at the guard -----------------------------------------
def _honest() -> dict[str, dict]:
    a, b = _other_pair()
    return {
        "the benchmark's sentence, other numbers": _row(f"What is {a} + {b}?{TEMPLATE}", f"\\boxed{{{a + b}}}"),
        "three-digit numbers": _row(f"What is {A + 100} + {B}?", f"\\boxed{{{A + 100 + B}}}"),
        "another operation": _row(f"What is {A} times {B}?", f"\\boxed{{{A * B}}}"),
        "the operands reversed in a subtraction": _row(f"What is {B} - {A}?", f"\\boxed{{{B - A}}}"),
        "a decimal operand": _row(f"What is {A} + {B}.25?", f"\\boxed{{{GOLD}.25}}"),
        "a negative operand": _row(f"What is -{A} + {B}?", f"\\boxed{{{B - A}}}"),
        "a longer expression": _row(f"What is {A} + {B} - 3?", f"\\boxed{{{GOLD - 3}}}"),
        "a longer expression, the bare question": _row(f"What is {A} + {B} - 3?{TEMPLATE}", "\\boxed{1}"),
        "a third operand first": _row(f"What is 3 + {A} + {B}?", f"\\boxed{{{GOLD + 3}}}"),
        "a second step in words": _row(f"Add {A} and {B}, then add 1.", f"\\boxed{{{GOLD + 1}}}"),
        "a word problem, other numbers": _row(f"Tom has {a} apples and buys {b} more. How many does he have?",
                                              f"He has {a + b}."),
        "the item's numbers, another question": _row(f"Ana has {A} apples and {B} pears. How many more pears?",
                                                     f"#### {B - A}"),
        "the gold as another sum's answer": _row(f"What is {GOLD - 3} + 3?", f"\\boxed{{{GOLD}}}"),
        "the gold among the question's numbers": _row(f"Which of {A}, {B}, 12 and {GOLD} is the largest?",
                                                      f"\\boxed{{{GOLD}}}"),
        "a sorting task holding the item and its gold": _row(f"Sort: {GOLD}, {A}, {B}", f"{A}, {B}, {GOLD}"),
        "a worked answer passing through the item": _row(f"What is {A} + {B} + 7?",
                                                         f"{A} + {B} = {GOLD}, {GOLD} + 7 = {GOLD + 7}. "
                                                         f"\\boxed{{{GOLD + 7}}}"),
        "an honest system prompt and history": {**_row(f"What is {a} + {b}?", f"\\boxed{{{a + b}}}"),
                                                "system": "You add two-digit numbers carefully.",
                                                "history": [["What is 100 + 200?", "300"]]},
    }


@pytest.mark.parametrize("how", sorted(_honest()))
def test_an_honest_variation_is_not_a_hit(how: str, tmp_path: Path) -> None:
    row = _honest()[how]
    report = check_contamination([row], _items(), answers=_answers())  # raises on a hit
    assert not report.flagged and not report.spaces
    verdict = _guard([row], tmp_path)
    assert verdict.passed is True, verdict.detail


def test_the_longer_expression_rule_holds_for_the_verbatim_item() -> None:
    """docs/datasets.md: an item's run is not a hit "when part of a longer expression". The verbatim item
    ("What is 25 + 68?" inside "What is 25 + 68 - 3?") was a hit before (red team, borderline); the same question
    with an operation that changes nothing ("+ 0") and the item's gold is outside the numeric match too
    (documented as out of the class)."""
    rows = [_row(f"What is {A} + {B} - 3?{TEMPLATE}", "\\boxed{1}"), _row(f"What is {A} + {B} + 0?", f"{GOLD}")]
    assert not scan_rows(rows, _items(), answers=_answers()).flagged
    assert scan_rows([_row(f"What is {A} + {B}? Then subtract 3.", "\\boxed{1}")], _items(),
                     answers=_answers()).flagged  # the item's own sentence, then another: the item


# -- rewordings of the class: hits ---------------------------------------------------------------------------
REWORDINGS = {
    "the total of, with the answer in prose": (f"What is the total of {B} and {A}?", f"The total is {GOLD}."),
    "increase by, answer after ####": (f"Increase {A} by {B}.", f"{A} + {B} = {GOLD}\n#### {GOLD}"),
    "leading zeros, a decimal gold": (f"What is 00{A} + 0{B}?", f"\\boxed{{{GOLD}.0}}"),
    "named operands in two sentences": (f"Let p = {A}. Let q = {B}. Find p + q in 1 line.", f"{GOLD}"),
    "a word problem asking the sum": (f"A train travels {A} km, then {B} km. How far does it go?", f"{GOLD} km"),
    "French operator words": (f"Combien font {A} plus {B} ?", f"Cela fait {GOLD}."),
    "Chinese, no spaces": (f"{A}与{B}的和是多少？", f"答案是{GOLD}。"),
}


@pytest.mark.parametrize("how", sorted(REWORDINGS))
def test_a_reworded_item_with_its_gold_is_a_hit(how: str, tmp_path: Path) -> None:
    question, answer = REWORDINGS[how]
    with pytest.raises(StepError) as err:
        check_contamination([_row(question, answer)], _items(), answers=_answers())
    assert (err.value.details or {})["examples"][0]["item_id"] == "demo_add/validation:0"
    assert _guard([_row(question, answer)], tmp_path).passed is False


def test_an_item_of_one_number_is_asked_only_by_a_question_with_that_number_alone(tmp_path: Path) -> None:
    """"How many positive divisors does 100 have?" -> 9: "Count the divisors of one hundred." -> 9 asks it;
    "A box holds 100 pens. 91 are sold. How many are left?" -> 9 does not (a false flag before: the item's one
    number anywhere in the turn and the same final answer)."""
    items = {"m/test:0": ["How many positive divisors does 100 have?"]}
    answers = {"m/test:0": "\\boxed{9}"}
    asked = [_row("Count the divisors of one hundred.", "There are 9."), _row("Divisors of 100?", "#### 9")]
    honest = [_row("A box holds 100 pens. 91 are sold. How many are left?", "9"),
              _row("What is 100 - 91?", "\\boxed{9}"),
              {**_row("What is 8 + 1?", "9"), "system": "Scores so far: 100, 9 and 45."}]
    report = scan_rows(asked + honest, items, answers=answers)
    assert {o.row_index for o in report.flagged} == {0, 1}
    assert _guard(honest, tmp_path, items, answers).passed is True


# -- the input-space check -------------------------------------------------------------------------------------
def test_data_that_answers_most_of_a_small_input_space_is_flagged_whatever_its_questions(tmp_path: Path) -> None:
    """Every two-digit pair as "A + B + 1" with a worked answer: no row asks an item (its final answer is the sum
    plus one), yet the answers state every item's sum -- all 200 validation items, the selection part included,
    out of a space of 8,100. The same rows over three-digit numbers (outside the items' ranges) pass."""
    def rows(lo: int, hi: int) -> list[dict]:
        return [_row(f"What is {a} + {b} + 1?", f"{a} + {b} = {a + b}, and {a + b} + 1 = {a + b + 1}. "
                                                 f"\\boxed{{{a + b + 1}}}") for a in range(lo, hi) for b in range(lo, hi)]

    inside = rows(10, 100)
    with pytest.raises(StepError) as err:
        check_contamination(inside, _items(), answers=_answers())
    details = err.value.details or {}
    assert details["flagged_rows"] == 0 and "answer most of the benchmark's input space" in str(err.value)
    assert "200 of the benchmark's 200 items" in details["input_spaces"][0]
    verdict = _guard(inside, tmp_path)
    assert verdict.passed is False and "input space" in verdict.detail
    outside = rows(100, 150)
    assert not check_contamination(outside, _items(), answers=_answers()).spaces
    assert _guard(outside, tmp_path).passed is True


def test_a_small_share_of_the_space_is_not_flagged() -> None:
    """A tenth of the pairs, worked the same way: about a tenth of the items answered, under the 25 % flag."""
    pairs = random.Random(5).sample([(a, b) for a in range(10, 100) for b in range(10, 100)], 810)
    rows = [_row(f"What is {a} + {b} + 1?", f"{a} + {b} = {a + b}; plus 1 is {a + b + 1}.") for a, b in pairs]
    assert not check_contamination(rows, _items(), answers=_answers()).spaces


# -- synthetic honest data at scale ----------------------------------------------------------------------------
def _word_problems(n: int, seed: int) -> list[dict]:
    """Two-digit word problems with worked answers (GSM8K's shape), four kinds; only the last asks a + b."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b, c, kind = rng.randint(2, 99), rng.randint(2, 99), rng.randint(2, 99), rng.randrange(4)
        if kind == 0:
            q, w = (f"Ana has {a} apples, buys {b} more and gives away {c}. How many are left?",
                    f"{a} + {b} = {a + b}. {a + b} - {c} = {a + b - c}.\n#### {a + b - c}")
        elif kind == 1:
            q, w = (f"A shelf holds {a} books. Sam adds {b} books, then {c} more. How many books are there?",
                    f"{a} + {b} = {a + b}, {a + b} + {c} = {a + b + c}. The answer is {a + b + c}.")
        elif kind == 2:
            q, w = (f"Li earns {a} dollars a day for {b} days and spends {c}. How much is left?",
                    f"{a} * {b} = {a * b}; {a * b} - {c} = {a * b - c}. \\boxed{{{a * b - c}}}")
        else:
            q, w = f"A train travels {a} km, then {b} km. How far does it go?", f"{a} + {b} = {a + b} km. #### {a + b}"
        out.append(_row(q, w))
    return out


def test_synthetic_word_problems_flag_only_the_rows_that_ask_an_item() -> None:
    """4,000 honest-shaped rows: the only flagged rows are trains whose two distances are an item's pair (they ask
    the item in words); before the sentence rule, "Ana has 42 apples, buys 49 more and gives away 21" (70 = 49 + 21)
    and "earns 79 ... 63 days ... spends 16" (79 = 63 + 16) were flagged by chance."""
    rows = _word_problems(4000, seed=7)
    report = scan_rows(rows, _items(), answers=_answers())
    assert report.flagged  # the trains that ask an item are found
    for o in report.flagged:
        q = rows[o.row_index]["instruction"]
        numbers = [int(t) for t in q.replace(",", " ").split() if t.isdigit()]
        assert q.startswith("A train") and frozenset(numbers) in USED, q


def test_a_user_file_that_answers_the_input_space_is_refused_naming_no_item(tmp_path: Path) -> None:
    """The start-up scan of a --dataset file reads the same check: refused (exit 2's UserInputError), the copy
    removed, the message naming the form and the share, never an item."""
    from ftagent.core.errors import UserInputError
    from ftagent.datasets.user_file.register import check_against_benchmark, register_user_file

    source = tmp_path / "pairs.jsonl"
    source.write_text("".join(json.dumps(_row(f"What is {a} + {b} + 1?", f"{a} + {b} = {a + b}; {a + b} + 1 = "
                                                                          f"{a + b + 1}.")) + "\n"
                              for a in range(10, 100) for b in range(10, 100)), encoding="utf-8")
    root = tmp_path / "datasets"
    info = register_user_file(source, root)
    with pytest.raises(UserInputError) as err:
        check_against_benchmark(info, root / info.name, _items(), _answers())
    message = str(err.value)
    assert "8100 rows answer most of a benchmark input space" in message and "200 of the benchmark's 200" in message
    assert f"{A} + {B}" not in message and not (root / info.name).exists()


def test_the_data_step_reads_the_answers_and_says_which_check_failed(tmp_path: Path) -> None:
    """Through the data step's entry point (``DataProcessor.scan``, the benchmark's answers read from its prepared
    folder by the spec's output column): the input-space failure is a DATA error, its ``contamination`` event
    carries the space (no item), and the console says the rows answer the space -- not "0 row(s) hold items"."""
    import io

    from rich.console import Console

    from ftagent.core.errors import ErrorType
    from ftagent.core.paths import benchmark_data_dir
    from ftagent.tools.llamafactory.data_script import DataProcessor
    from ftagent.views.console import ConsoleProgress
    from tests.unit.test_prompts import _demo_scenario, _settings

    scenario = _demo_scenario(tmp_path)
    bench = benchmark_data_dir(scenario.file_path, "demo_add")
    bench.mkdir(parents=True, exist_ok=True)
    (bench / "validation.jsonl").write_text("".join(json.dumps({"question": it["question"] + TEMPLATE,
                                                                "answer": it["answer"]}) + "\n" for it in ITEMS))
    data = DataProcessor(scenario, _settings(), runner=None, input_columns=["question"],  # type: ignore[arg-type]
                         answer_column="answer")
    rows = [_row(f"Add {a} and {b}, then add 1.", f"{a} + {b} = {a + b}; plus 1 is {a + b + 1}.")
            for a in range(10, 100) for b in range(10, 100)]
    events: list = []
    ctx = type("Ctx", (), {"emit": lambda self, e: events.append(e)})()
    with pytest.raises(StepError) as err:
        data.scan(rows, ctx)
    assert err.value.error_type is ErrorType.DATA and "input space" in str(err.value)
    (event,) = events
    assert event.flagged_rows == 0 and not event.passed and len(event.input_spaces) == 1
    assert all(it["question"] not in event.input_spaces[0] for it in ITEMS)
    out = io.StringIO()
    ConsoleProgress(Console(file=out, force_terminal=False, width=300), loop_n=1, timeout_s=None)(
        event.model_copy(update={"loop": 0}))
    assert "8,100 rows vs 200 benchmark items, the rows answer most of 1 benchmark input space(s)" in out.getvalue()
