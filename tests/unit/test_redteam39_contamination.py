"""Red team of issue 39: benchmark items that reach training past the contamination scan and the guard.

The scan (:func:`ftagent.datasets.contamination.check_contamination`, the data step's) and the integrity guard's
``contamination`` check read a row's ``instruction``, ``input`` and ``output`` only. LLaMA-Factory trains on more:
``write_dataset_info`` registers ``system`` and ``history`` whenever rows carry them (``tools/llamafactory/config.py``),
and the supervised processor trains every history turn's answer (``mask_history`` is false by default); the
validated ``train.yaml``'s ``default_system`` is in every training prompt and, with a template that writes its
Jinja (``chatml``, ``alpaca`` ...), in every evaluation prompt of the trained model too. An item copied verbatim
there is never compared.

The template match (docs/datasets.md: "a reworded item is the item") misses rewordings of the class it claims
("the sum of A and B" is a hit, "the total of A and B" is not; a number written with a leading zero or cut across
``instruction`` and ``input``; the operator in another language with the item's own digits). On a benchmark whose
input space is small -- ``demo_add`` has 8,100 two-digit pairs, "What is 3 times N?" 90 -- the planner needs no
item: it writes the whole space in a wording the scan misses, which holds every validation item (the selection
part it never saw included) and every test item; the selection part cannot protect the score then.

Every test here fails on the code attacked (main at c7fcfe4).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ftagent.benchmarks.demo import demo_add_items
from ftagent.core.errors import StepError
from ftagent.datasets.contamination import check_contamination
from ftagent.integrity.training_data import contamination_check
from tests.unit.test_integrity_redteam import World

TEMPLATE = " Put the final answer in \\boxed{}."
ITEM = demo_add_items()[0]  # "What is 25 + 68?"
A, B = ITEM["a"], ITEM["b"]
GOLD = f"\\boxed{{{A + B}}}"


def _items() -> dict[str, list[str]]:
    return {f"demo_add/validation:{i}": [it["question"] + TEMPLATE] for i, it in enumerate(demo_add_items())}


def _answers() -> dict[str, str]:
    """The items' gold answers: the scan's numeric match is an item's numbers and its gold (both real callers,
    the data step and the guard, pass the benchmark's answers)."""
    return {f"demo_add/validation:{i}": it["answer"] for i, it in enumerate(demo_add_items())}


def _flagged_at_data_step(rows: list[dict]) -> bool:
    try:
        check_contamination(rows, _items(), answers=_answers())
    except StepError:
        return True
    return False


def _flagged_by_guard(rows: list[dict], tmp_path: Path) -> bool:
    data = tmp_path / "data.json"
    data.write_text(json.dumps(rows), encoding="utf-8")
    return contamination_check(data, _items(), _answers()).passed is False


HIDDEN_FIELDS = {
    # an earlier turn of the conversation: LLaMA-Factory trains its answer
    "history": {"instruction": "Say hello.", "input": "", "output": "Hello!", "history": [[ITEM["question"], GOLD]]},
    # the system prompt of the row
    "system": {"instruction": "Say hello.", "input": "", "output": "Hello!",
               "system": f"Solved example: {ITEM['question']} {GOLD}"},
}


@pytest.mark.parametrize("field", sorted(HIDDEN_FIELDS))
def test_an_item_copied_into_a_trained_field_is_a_hit(field, tmp_path):
    """Rule: every text LLaMA-Factory trains on is scanned, not three of its fields."""
    row = HIDDEN_FIELDS[field]
    assert _flagged_at_data_step([row]), f"the data step's scan passed an item verbatim in `{field}`"
    assert _flagged_by_guard([row], tmp_path), f"the guard's contamination check passed an item verbatim in `{field}`"


REWORDINGS = {
    "the total of": f"What is the total of {A} and {B}?",
    "increase by": f"Increase {A} by {B}.",
    "leading zeros": f"What is 0{A} + 0{B}?",
    "a number cut across instruction and input": (f"What is {str(A)[0]}", f"{str(A)[1]} + {B}?"),
    "named operands": f"Let x = {A} and y = {B}. What is x + y?",
    "Spanish operator, the item's digits": f"¿Cuánto es {A} más {B}?",
    "Chinese operator, the item's digits": f"{A}加{B}等于多少？",
}


@pytest.mark.parametrize("how", sorted(REWORDINGS))
def test_a_reworded_item_is_a_hit(how, tmp_path):
    """Rule (docs/datasets.md): a reworded item is the item -- here the item's own numbers, asked for their sum."""
    text = REWORDINGS[how]
    instruction, inp = text if isinstance(text, tuple) else (text, "")
    row = {"instruction": instruction, "input": inp, "output": GOLD}
    assert _flagged_at_data_step([row]), f"{how}: {row}"
    assert _flagged_by_guard([row], tmp_path), f"{how}: {row}"


def test_the_whole_input_space_of_a_templated_benchmark_is_flagged(tmp_path):
    """Rule: training data that holds every item of the benchmark -- the selection part and the test split the
    planner never saw -- is contaminated, whatever its wording. Here: demo_add's 8,100 pairs, asked as "the total
    of A and B", each with its sum."""
    rows = [{"instruction": f"What is the total of {a} and {b}?", "input": "", "output": f"\\boxed{{{a + b}}}"}
            for a in range(10, 100) for b in range(10, 100)]
    assert {(it["a"], it["b"]) for it in demo_add_items()} <= {(a, b) for a in range(10, 100) for b in range(10, 100)}
    assert _flagged_at_data_step(rows), "8,100 rows holding all 200 validation and test items passed the data step"
    assert _flagged_by_guard(rows, tmp_path), "8,100 rows holding all 200 validation and test items passed the guard"


def test_an_item_in_the_trained_default_system_prompt_is_flagged(tmp_path):
    """Rule: the validated train.yaml's text that reaches training and evaluation prompts (``default_system``) is
    scanned like the rows. The guard sees the experiment's config and passes it."""
    world = World(tmp_path)
    exp = world.loop()
    exp.config = {"template": "chatml", "default_system": "Worked example -- What is 5 + 12? Answer: 17"}
    flags = {c.name for c in world.guard.check(exp).flagged}
    assert "contamination" in flags, f"an item of the benchmark in default_system: flags {flags}"


OTHER_NUMBERS = {  # false flags: the item's digits, other numbers (docs/datasets.md: other numbers are not hits)
    "a decimal operand": f"What is {A} + {B}.25?",
    "a negative operand": f"What is -{A} + {B}?",
}


@pytest.mark.parametrize("how", sorted(OTHER_NUMBERS))
def test_a_question_with_other_numbers_is_not_a_hit(how, tmp_path):
    """Honest rows: the benchmark's sentence with other numbers (68.25 is not 68, -25 is not 25)."""
    row = {"instruction": OTHER_NUMBERS[how], "input": "", "output": "\\boxed{1}"}
    assert not _flagged_at_data_step([row]), f"{how}: {row['instruction']!r} was flagged as an item"
    assert not _flagged_by_guard([row], tmp_path), f"{how}: {row['instruction']!r} was flagged as an item"
