"""Math benchmark helpers: gold answers of MATH (last ``\\boxed{}`` of the solution) and GSM8K (``####``).

The benchmarks themselves (``aime24``, ``aime25``, ``math``, ``gsm8k``) are configs/benchmarks/*.yaml.
Published layouts (dataset-and-benchmark-formats.md §B6/§B7): AIME 2024 ``{"origin_prompt",
"gold_answer"}`` (OpenCompass) or ``{"Problem", "Answer"}`` (HF copies); AIME 2025 ``{"question",
"answer"}``; MATH an id-keyed object of ``{"problem", "solution"}`` or rows with ``answer``; GSM8K
``{"question", "answer": "... #### N"}``.
"""

from __future__ import annotations

from typing import Any

from ftagent.core.boxed import last_boxed_content


def gsm8k_gold(answer: str) -> str:
    """The number after ``#### `` with thousands separators removed."""
    return answer.split("####")[-1].strip().replace(",", "")


def math_item(row: dict[str, Any], subset: str = "default", bench: Any = None) -> dict[str, Any]:
    """Item transform ``math_solution``: gold = ``answer`` or the last boxed expression of ``solution``."""
    answer = row.get("answer") or last_boxed_content(row.get("solution", "")) or ""
    if str(answer).strip() == "":
        raise ValueError("no gold answer: the row has no `answer` and its `solution` has no \\boxed{}")
    return {"question": str(row.get("problem") or row["question"]), "answer": str(answer)}


def gsm8k_item(row: dict[str, Any], subset: str = "default", bench: Any = None) -> dict[str, Any]:
    """Item transform ``gsm8k``: the question and the number after ``####``."""
    return {"question": row["question"], "answer": gsm8k_gold(row["answer"])}
