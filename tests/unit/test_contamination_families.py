"""Contamination scan per benchmark family: one planted validation item and one planted test item each.

Items come from real benchmark files on disk through :func:`benchmark_items` (the data step's own
path), in each family's real field layout; the planted training rows copy an item the way generated
data does in practice (option labels, numbered steps, LaTeX layout, thousands separators, a question
without its test asserts, a prompt template left out). Each of these rows escaped the scan before
labels, enumerators and template n-grams were normalised away.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from ftagent.core.errors import StepError
from ftagent.core.types import ScenarioInfo
from ftagent.datasets.contamination import check_contamination, scan_rows
from ftagent.datasets.demo_add import generate_rows
from ftagent.tools.llamafactory.data_script import benchmark_items

# each family's input fields, question/prompt first (as the built-in benchmark adapters declare them)
INPUT_COLUMNS = {"aime25": ["question"], "mmlu": ["question", "subject", "A", "B", "C", "D"],
                 "FinanceIQ_gen": ["question", "A", "B", "C", "D"], "mbpp": ["question", "tests"],
                 "bioprobench_ord": ["prompt"], "demo_add": ["question"]}


@pytest.fixture(autouse=True)
def _adapters(monkeypatch):
    """Benchmark adapters reduced to their input columns (the benchmark registry is not under test)."""
    import ftagent.benchmarks as benchmarks

    monkeypatch.setattr(benchmarks, "get_benchmark", lambda key: SimpleNamespace(
        spec=SimpleNamespace(input_columns=INPUT_COLUMNS[key])))


def _bench(tmp_path: Path, key: str, splits: dict[str, list[dict]], subset: str = "default") -> dict:
    for split, rows in splits.items():
        path = tmp_path / "benchmarks" / key / subset / f"{split}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    from ftagent.benchmarks import get_benchmark

    return benchmark_items(ScenarioInfo.model_construct(benchmark=key, file_path=str(tmp_path)),
                           list(get_benchmark(key).spec.input_columns))


def _flagged(rows: list[dict], items: dict) -> dict[int, str]:
    return {o.row_index: o.item_id for o in scan_rows(rows, items).flagged}


def _filler(n: int = 40) -> list[dict]:
    return generate_rows(n, seed=5)


def _assert_planted(rows: list[dict], items: dict, expected: dict[int, str]) -> None:
    assert _flagged(rows, items) == expected
    with pytest.raises(StepError) as info:
        check_contamination(rows, items)
    assert f"{len(expected)} of {len(rows)} training rows" in info.value.message


# ------------------------------------------------------------------------------------- math
MATH_VAL = r"Find the number of positive integers $n \le 2,025$ such that $\left(\dfrac{n}{3}\right)^{2}$ is an integer."
MATH_TEST = (r"Let $S$ be the sum of all $x$ with $\left| x - 1,000 \right| \le 12$ and "
             r"$\dfrac{x}{4}$ an integer. Find $S$.")


def test_math_family(tmp_path):
    items = _bench(tmp_path, "aime25", {"validation": [{"question": MATH_VAL, "answer": "675"},
                                                       {"question": "Compute $2^{10}$.", "answer": "1024"}],
                                        "test": [{"question": MATH_TEST, "answer": "7000"}]})
    rows = _filler()
    rows.insert(3, {"instruction": r"Find the number of positive integers n \le 2025 such that (\frac{n}{3})^2 "
                                   r"is an integer.", "input": "", "output": r"\boxed{675}"})
    rows.insert(30, {"instruction": "Solve step by step.", "input": r"Let S be the sum of all x with |x - 1000| "
                                                                   r"\le 12 and \frac{x}{4} an integer. Find S.",
                     "output": r"\boxed{7000}"})
    _assert_planted(rows, items, {3: "default/validation:0", 30: "default/test:0"})


# ----------------------------------------------------------------------- knowledge / MCQ
MMLU_VAL = {"question": "Which enzyme unwinds the double helix during DNA replication?", "subject": "college_biology",
            "A": "Ligase", "B": "Helicase", "C": "Primase", "D": "Polymerase", "answer": "B"}
MMLU_TEST = {"question": "The Treaty of Westphalia in 1648 ended which conflict?", "subject": "world_history",
             "A": "The Hundred Years War", "B": "The Thirty Years War", "C": "The Seven Years War",
             "D": "The War of the Roses", "answer": "B"}


def _mmlu_row(item: dict) -> dict:
    subject = item["subject"].replace("_", " ")
    return {"instruction": f"The following are multiple choice questions about {subject}.\n\n{item['question']}\n"
                           f"A. {item['A']}\nB. {item['B']}\nC. {item['C']}\nD. {item['D']}\nAnswer:",
            "input": "", "output": item["answer"]}


def test_knowledge_family_mmlu(tmp_path):
    other = {"question": "What is the capital of France?", "subject": "geography", "A": "Paris", "B": "Rome",
             "C": "Madrid", "D": "Berlin", "answer": "A"}
    items = _bench(tmp_path, "mmlu", {"validation": [MMLU_VAL, other], "test": [MMLU_TEST]})
    rows = _filler()
    rows.insert(5, _mmlu_row(MMLU_VAL))
    rows.insert(20, _mmlu_row(MMLU_TEST))
    _assert_planted(rows, items, {5: "default/validation:0", 20: "default/test:0"})


FIQ_VAL = {"question": "下列属于货币政策工具的是", "A": "再贴现率", "B": "财政补贴", "C": "政府采购",
           "D": "税收调整", "answer": "A"}
FIQ_TEST = {"question": "商业银行的核心资本包括", "A": "实收资本和资本公积", "B": "次级债券",
            "C": "长期优先股", "D": "重估储备", "answer": "A"}


def _fiq_row(item: dict, subject: str = "银行从业") -> dict:  # datasets/financeiq.py's own training format
    return {"instruction": f"以下是关于{subject}的单项选择题，请直接给出正确答案的选项。\n题目：{item['question']}\n"
                           f"A. {item['A']}\nB. {item['B']}\nC. {item['C']}\nD. {item['D']}",
            "input": "", "output": f"答案是: {item['answer']}"}


def test_knowledge_family_financeiq(tmp_path):
    items = _bench(tmp_path, "FinanceIQ_gen", {"validation": [FIQ_VAL], "test": [FIQ_TEST]}, subset="银行从业")
    rows = _filler()
    rows.insert(0, _fiq_row(FIQ_VAL))
    rows.insert(11, _fiq_row(FIQ_TEST))
    _assert_planted(rows, items, {0: "银行从业/validation:0", 11: "银行从业/test:0"})


# ------------------------------------------------------------------------------------- code
MBPP_VAL = {"question": "Write a function to find the shared elements from the given two lists.",
            "tests": ["assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))",
                      "assert set(similar_elements((1, 2, 3, 4),(5, 4, 3, 7))) == set((3, 4))",
                      "assert set(similar_elements((11, 12, 14, 13),(17, 15, 14, 13))) == set((13, 14))"]}
MBPP_TEST = {"question": "Write a python function to identify non-prime numbers below a given bound.",
             "tests": ["assert is_not_prime(2) == False", "assert is_not_prime(10) == True",
                       "assert is_not_prime(35) == True", "assert is_not_prime(37) == False"]}


def test_code_family_mbpp(tmp_path):
    items = _bench(tmp_path, "mbpp", {"validation": [MBPP_VAL], "test": [MBPP_TEST]})
    rows = _filler()
    rows.insert(8, {"instruction": MBPP_VAL["question"], "input": "",
                    "output": "def similar_elements(a, b):\n    return tuple(set(a) & set(b))\n"})
    rows.insert(9, {"instruction": "Solve the task in Python.", "input": MBPP_TEST["question"],
                    "output": "def is_not_prime(n):\n    return n < 2 or any(n % d == 0 for d in range(2, n))\n"})
    rows.append({"instruction": "Write a function to find the maximum of two numbers.", "input": "",
                 "output": "def m(a, b):\n    return max(a, b)\n"})
    _assert_planted(rows, items, {8: "default/validation:0", 9: "default/test:0"})


# ----------------------------------------------------------------------------------- domain
def _ord_item(title: str, steps: list[str]) -> dict:
    from ftagent.benchmarks.domain.bioprobench import build_prompt

    item = {"question": f"Please sort the following steps titled '{title}' in the correct order.",
            "wrong_steps": steps}
    return {"prompt": build_prompt("ORD", item), "answer": "[0]"}


VAL_STEPS = ["Centrifuge the lysate at 12000 g for ten minutes.", "Resuspend the pellet in cold lysis buffer.",
             "Harvest the cells by scraping."]
TEST_STEPS = ["Incubate the membrane with the primary antibody overnight.", "Block the membrane in milk.",
              "Wash the membrane three times with buffer."]


def test_domain_family_bioprobench_ord(tmp_path):
    items = _bench(tmp_path, "bioprobench_ord", {
        "validation": [_ord_item("Protein extraction", VAL_STEPS), _ord_item("Wash", ["Dry.", "Wash."])],
        "test": [_ord_item("Western blot", TEST_STEPS), _ord_item("Lysis", ["Spin.", "Add buffer."])]})
    rows = _filler()
    numbered = "\n".join(f"{i}. {s}" for i, s in enumerate(VAL_STEPS, 1))
    rows.insert(2, {"instruction": "Please sort the following steps titled 'Protein extraction' in the correct "
                                   f"order.\n{numbered}", "input": "", "output": "3, 2, 1"})
    stepwise = "\n".join(f"Step {i}: {s}" for i, s in enumerate(TEST_STEPS, 1))
    rows.insert(25, {"instruction": "Put these protocol steps in order.",
                     "input": f"Please sort the following steps titled 'Western blot' in the correct order.\n{stepwise}",
                     "output": "2, 1, 3"})
    _assert_planted(rows, items, {2: "default/validation:0", 25: "default/test:0"})


# ------------------------------------------------------------------------------------- demo
def test_demo_family(tmp_path):
    items = _bench(tmp_path, "demo_add", {"validation": [{"question": "What is 12 + 45?", "answer": "57"}],
                                          "test": [{"question": "What is 34 + 56?", "answer": "90"}]})
    rows = [{"instruction": "What is 13 + 45?", "input": "", "output": "58"}]
    rows.append({"instruction": r"What is $\mathbf{12} + \mathbf{45}$? Put the final answer in \boxed{}.",
                 "input": "", "output": r"\boxed{57}"})
    rows.append({"instruction": r"What is \left(34\right) + \left(56\right)?", "input": "", "output": "90"})
    _assert_planted(rows, items, {1: "default/validation:0", 2: "default/test:0"})


def test_normalisation_keeps_unrelated_text_apart():
    from ftagent.datasets.contamination import normalise

    assert normalise("A. Paris\nB. Rome") == ["paris", "rome"]
    # a decimal is one number (issue 39 red team: "68.25" read as 68 and 25 made "What is 25 + 68.25?" the item 25 + 68)
    assert normalise("(c) 3,600 and 3.5") == ["3600", "and", "3.5"]
    assert normalise("Step 2: don\u2019t stir") == ["do", "not", "stir"]  # contractions as words (issue 39)
    assert normalise(r"\left(\dfrac{1}{2}\right)") == ["frac", "1", "2"]
    assert normalise("pro\u00adduct\u200b of") == ["product", "of"]
    assert normalise("Vitamin B12 is 1.5 mg") == ["vitamin", "b12", "is", "1.5", "mg"]


def test_a_number_is_read_whole_with_its_sign_and_decimal_part():
    """Issue 39 red team false flags: "What is 25 + 68.25?" and "What is -25 + 68?" were hits of the item
    "What is 25 + 68?" (68.25 was read as 68 and 25, and the minus before 25 as an operation)."""
    from ftagent.datasets.contamination import normalise

    assert normalise("What is -25 + 68?") == ["what", "is", "-25", "plus", "68"]
    assert normalise("What is 25 - 68? And 25-68, 25 \u2212 68, x = \u221225") == [
        "what", "is", "25", "minus", "68", "and", "25", "minus", "68", "25", "minus", "68", "x", "equals", "-25"]
    assert normalise("025 + 68.50 = 093.0") == ["25", "plus", "68.5", "equals", "93"]
    assert normalise("25\u52a068") == ["25", "\u52a0", "68"]  # a number ends at a CJK character
    items = {"demo_add/validation:0": ["What is 25 + 68? Put the final answer in \\boxed{}."]}
    items |= {f"demo_add/validation:{i}": [f"What is {i} + 7? Put the final answer in \\boxed{{}}."]
              for i in range(10, 40)}
    other = [{"instruction": text, "input": "", "output": "1"}
             for text in ("What is 25 + 68.25?", "What is -25 + 68?", "What is 25 + -68?", "What is 25.5 + 68?")]
    assert not scan_rows(other, items).flagged
    same = [{"instruction": text, "input": "", "output": "93"} for text in ("What is 025 + 68?", "What is 25.0 + 68?")]
    assert {o.row_index for o in scan_rows(same, items).flagged} == {0, 1}
