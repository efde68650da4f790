"""Math benchmarks: ``aime24``, ``aime25``, ``math`` (boxed answers) and ``gsm8k`` (last number).

Data layouts follow the published files (dataset-and-benchmark-formats.md §B6/§B7): AIME 2024
``{"origin_prompt", "gold_answer"}`` (OpenCompass) or ``{"Problem", "Answer"}`` (HF copies); AIME 2025
``{"question", "answer"}``; MATH an id-keyed object of ``{"problem", "solution"}`` (gold = last
``\\boxed{}`` of the solution) or rows with ``answer``; GSM8K ``{"question", "answer": "... #### N"}``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ftagent.benchmarks.base import BenchmarkSpec, TableAdapter, hub_snapshot, read_table

BOXED_PROMPT = "{question}\nPlease reason step by step, and put your final answer within \\boxed{}."
AIME25_PROMPT = "{question}\nRemember to put your final answer within \\boxed{}."


def last_boxed_content(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` / ``\\fbox{...}`` with balanced braces, or None."""
    starts = [m.end() for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text or "")]
    if not starts:
        return None
    i, depth, start = starts[-1], 1, starts[-1]
    while i < len(text) and depth:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    return text[start:i - 1].strip() if depth == 0 else None


def gsm8k_gold(answer: str) -> str:
    """The number after ``#### `` with thousands separators removed."""
    return answer.split("####")[-1].strip().replace(",", "")


def _rows_from(dir_: Path, patterns: tuple[str, ...]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for pattern in patterns:
        for path in sorted(dir_.rglob(pattern)):
            rows.extend(read_table(path))
        if rows:
            break
    return rows


class _HubMath(TableAdapter):
    repo_id = ""
    patterns: tuple[str, ...] = ("*.jsonl", "*.parquet", "*.json")
    evaluator = "opencompass.datasets:MATHEvaluator"
    evaluator_kwargs = {"version": "v2"}
    postprocessor = "opencompass.datasets:math_postprocess_v2"

    def raw_subsets(self, root: Path) -> dict[str, list[dict[str, Any]]]:
        raw = hub_snapshot(self.repo_id, self.bench_dir(root) / "raw")
        return {"default": _rows_from(raw, self.patterns)}


class Aime24Adapter(_HubMath):
    """AIME 2024 (30 problems), boxed integer answers."""

    repo_id = "Maxwell-Jia/AIME_2024"
    spec = BenchmarkSpec(
        key="aime24", category="math", data_source="hf:Maxwell-Jia/AIME_2024",
        related_datasets=["deepscaler"], prompt=BOXED_PROMPT,
        answer_rule="last \\boxed{} → MATH v2 normalisation → equivalence",
        evaluator="opencompass.datasets:MATHEvaluator(version='v2')", max_out_len=8192,
    )

    def to_item(self, row: dict[str, Any], subset: str) -> dict[str, Any]:
        q = row.get("origin_prompt") or row.get("Problem") or row.get("problem") or row["question"]
        a = row.get("gold_answer") or row.get("Answer") or row.get("answer")
        return {"question": str(q), "answer": str(a).strip()}


class Aime25Adapter(Aime24Adapter):
    """AIME 2025 (I + II); rule check, then optionally an LLM judge for rule misses."""

    repo_id = "opencompass/AIME2025"
    supports_judge = True
    spec = BenchmarkSpec(
        key="aime25", category="math", data_source="hf:opencompass/AIME2025",
        related_datasets=["deepscaler"], prompt=AIME25_PROMPT,
        answer_rule="last \\boxed{} → MATH v2 equivalence; rule misses → LLM judge when FT_JUDGE_* is set",
        evaluator="opencompass.datasets:MATHEvaluator(version='v2') [+ CascadeEvaluator judge]",
        max_out_len=8192,
    )


class MathAdapter(_HubMath):
    """MATH (competition problems), gold = last boxed expression of the solution."""

    repo_id = "nlile/hendrycks-MATH-benchmark"
    spec = BenchmarkSpec(
        key="math", category="math", data_source="hf:nlile/hendrycks-MATH-benchmark",
        related_datasets=["deepscaler"], prompt=BOXED_PROMPT,
        answer_rule="last \\boxed{} → MATH v2 normalisation → equivalence",
        evaluator="opencompass.datasets:MATHEvaluator(version='v2')", max_out_len=1024,
    )

    def to_item(self, row: dict[str, Any], subset: str) -> dict[str, Any]:
        answer = row.get("answer") or last_boxed_content(row.get("solution", "")) or ""
        return {"question": str(row.get("problem") or row["question"]), "answer": str(answer)}


GSM8K_SHOTS = [  # ftagent's own worked examples (short, so CPU runs stay cheap)
    ("A baker makes 12 rolls per tray and bakes 3 trays. She sells 20 rolls. How many rolls are left?",
     "She bakes 12 * 3 = 36 rolls. After selling 20, 36 - 20 = 16 remain. The answer is 16"),
    ("Tim reads 15 pages a day for 6 days and then 10 pages on the seventh day. How many pages did he read?",
     "In six days he reads 15 * 6 = 90 pages. Adding 10 gives 90 + 10 = 100. The answer is 100"),
    ("A ticket costs $8 and a snack costs $3. How much do 4 tickets and 2 snacks cost?",
     "Tickets: 4 * 8 = 32. Snacks: 2 * 3 = 6. Total 32 + 6 = 38. The answer is 38"),
    ("A garden has 5 rows of 9 plants. A storm destroys a third of them. How many plants survive?",
     "There are 5 * 9 = 45 plants. A third is 45 / 3 = 15, so 45 - 15 = 30 survive. The answer is 30"),
]
GSM8K_USER = "Question: {question}\nLet's think step by step\nAnswer:"


class Gsm8kAdapter(TableAdapter):
    """GSM8K test set, 4 fixed worked examples; last number of the output vs the ``####`` number."""

    spec = BenchmarkSpec(
        key="gsm8k", category="math", data_source="hf:openai/gsm8k (main)",
        related_datasets=["deepscaler"], prompt=GSM8K_USER,
        answer_rule="text before 'Question:', last number; gold = number after '####'",
        evaluator="opencompass.datasets:Gsm8kEvaluator", max_out_len=512,
    )
    evaluator = "opencompass.datasets:Gsm8kEvaluator"
    evaluator_kwargs: dict[str, Any] = {}
    postprocessor = "opencompass.datasets:gsm8k_postprocess"

    def raw_subsets(self, root: Path) -> dict[str, list[dict[str, Any]]]:
        raw = hub_snapshot("openai/gsm8k", self.bench_dir(root) / "raw", ["main/test*"])
        return {"default": _rows_from(raw, ("test*.parquet", "test*.jsonl"))}

    def to_item(self, row: dict[str, Any], subset: str) -> dict[str, Any]:
        return {"question": row["question"], "answer": gsm8k_gold(row["answer"])}

    def rounds(self, root: Path, subset: str) -> list[dict[str, str]]:
        turns: list[dict[str, str]] = []
        for q, a in GSM8K_SHOTS:
            turns += [{"role": "HUMAN", "prompt": GSM8K_USER.replace("{question}", q)},
                      {"role": "BOT", "prompt": a + "\n"}]
        return turns + [{"role": "HUMAN", "prompt": GSM8K_USER}]
