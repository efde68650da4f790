"""Multiple-choice knowledge benchmarks: ``mmlu`` (0-shot) and ``FinanceIQ_gen`` (5-shot, Chinese).

Published layouts: MMLU (``cais/mmlu``) rows ``{"question", "subject", "choices": [4], "answer": 0-3}``;
FinanceIQ (``Duxiaoman-DI/FinanceIQ``) CSV files ``data/{dev,test}/<subject>.csv`` with columns
``question, A, B, C, D, answer``. Scored by option-letter accuracy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ftagent.benchmarks.base import BenchmarkSpec, TableAdapter, hub_snapshot, read_table

LETTERS = "ABCD"
MMLU_PROMPT = ("The following is a multiple-choice question about {subject}. Answer with the option letter.\n"
               "{question}\nA. {A}\nB. {B}\nC. {C}\nD. {D}\nAnswer:")
FINANCEIQ_USER = ("以下是关于{subject}的单项选择题，请直接给出正确答案的选项。\n题目：{question}\n"
                  "A. {A}\nB. {B}\nC. {C}\nD. {D}")
FINANCEIQ_SUBJECTS = ["注册会计师（CPA）", "银行从业资格", "证券从业资格", "基金从业资格", "保险从业资格CICE",
                      "经济师", "税务师", "期货从业资格", "理财规划师", "精算师-金融数学"]
FEW_SHOT = 5


def mmlu_item(row: dict[str, Any]) -> dict[str, Any]:
    """An MMLU row → ``{question, subject, A..D, answer letter}``."""
    choices = list(row["choices"])
    answer = row["answer"]
    letter = LETTERS[int(answer)] if str(answer).isdigit() else str(answer).strip().upper()
    out = {"question": row["question"], "subject": str(row.get("subject", "")).replace("_", " ")}
    out.update({LETTERS[i]: str(c) for i, c in enumerate(choices[:4])})
    out["answer"] = letter
    return out


class MmluAdapter(TableAdapter):
    """MMLU test set (all subjects in one sub-dataset), first option letter in the output."""

    spec = BenchmarkSpec(
        key="mmlu", category="knowledge", data_source="hf:cais/mmlu (all)", related_datasets=[],
        prompt=MMLU_PROMPT, answer_rule="first option letter A-D in the output, exact match",
        evaluator="opencompass.openicl.icl_evaluator:AccwithDetailsEvaluator", max_out_len=32,
        input_columns=["question", "subject", "A", "B", "C", "D"],
    )
    evaluator = "opencompass.openicl.icl_evaluator:AccwithDetailsEvaluator"
    evaluator_kwargs: dict[str, Any] = {}
    postprocessor = "opencompass.utils.text_postprocessors:first_option_postprocess"
    postprocessor_kwargs = {"options": "ABCD"}

    def raw_subsets(self, root: Path) -> dict[str, list[dict[str, Any]]]:
        raw = hub_snapshot("cais/mmlu", self.bench_dir(root) / "raw", ["all/test-*"])
        return {"default": [r for p in sorted(raw.rglob("test-*.parquet")) for r in read_table(p)]}

    def to_item(self, row: dict[str, Any], subset: str) -> dict[str, Any]:
        return mmlu_item(row)


class FinanceIQAdapter(TableAdapter):
    """FinanceIQ: 10 subject sub-datasets, 5-shot from the subject's dev rows 0-4, last capital letter."""

    spec = BenchmarkSpec(
        key="FinanceIQ_gen", category="finance", data_source="hf:Duxiaoman-DI/FinanceIQ",
        related_datasets=["financeiq"], prompt=FINANCEIQ_USER,
        answer_rule="last upper-case letter of the output, exact match with the gold letter",
        evaluator="opencompass.openicl.icl_evaluator:AccwithDetailsEvaluator", max_out_len=64,
        input_columns=["question", "A", "B", "C", "D"], subsets=FINANCEIQ_SUBJECTS,
    )
    evaluator = "opencompass.openicl.icl_evaluator:AccwithDetailsEvaluator"
    evaluator_kwargs: dict[str, Any] = {}
    postprocessor = "opencompass.utils.text_postprocessors:last_capital_postprocess"

    def _raw(self, root: Path) -> Path:
        return hub_snapshot("Duxiaoman-DI/FinanceIQ", self.bench_dir(root) / "raw", ["data/*"])

    def raw_subsets(self, root: Path) -> dict[str, list[dict[str, Any]]]:
        raw = self._raw(root)
        return {s: read_table(raw / "data" / "test" / f"{s}.csv") for s in self.spec.subsets
                if (raw / "data" / "test" / f"{s}.csv").exists()}

    def to_item(self, row: dict[str, Any], subset: str) -> dict[str, Any]:
        return {k: str(row[k]).strip() for k in ("question", "A", "B", "C", "D", "answer")}

    def rounds(self, root: Path, subset: str) -> list[dict[str, str]]:
        dev = read_table(self._raw(root) / "data" / "dev" / f"{subset}.csv")[:FEW_SHOT]
        turns: list[dict[str, str]] = []
        for row in dev:
            user = FINANCEIQ_USER.replace("{subject}", subset)
            for k in ("question", "A", "B", "C", "D"):
                user = user.replace("{" + k + "}", str(row[k]).strip())
            turns += [{"role": "HUMAN", "prompt": user},
                      {"role": "BOT", "prompt": f"答案是: {str(row['answer']).strip()}\n"}]
        return turns + [{"role": "HUMAN", "prompt": FINANCEIQ_USER.replace("{subject}", subset)}]
