"""Code benchmarks: ``humaneval`` and ``mbpp``, scored by pass@1 of the published unit tests.

Published layouts: HumanEval (``openai/openai_humaneval``) rows ``{"task_id", "prompt",
"canonical_solution", "test", "entry_point"}``; MBPP (``google-research-datasets/mbpp``) rows
``{"task_id", "text", "code", "test_list": [...]}``. The gold column ``answer`` holds the test program
the extracted code must pass (``ftagent.tools.opencompass.oc_ext:PythonTestsEvaluator``, one subprocess per
sample with a timeout).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ftagent.benchmarks.base import BenchmarkSpec, TableAdapter, hub_snapshot, read_table

HUMANEVAL_PROMPT = ("Complete the following Python function. Reply with the full function in a "
                    "```python code block.\n```python\n{prompt}```")
MBPP_PROMPT = ("You are an expert Python programmer. {question}\nYour code should pass these tests:\n"
               "{tests}\nReply with the code in a ```python code block.")


def humaneval_item(row: dict[str, Any]) -> dict[str, Any]:
    """HumanEval row → ``{prompt, entry_point, answer: test program}``."""
    test = f"{row['test']}\n\ncheck({row['entry_point']})\n"
    return {"prompt": row["prompt"], "entry_point": row["entry_point"], "answer": test}


def mbpp_item(row: dict[str, Any]) -> dict[str, Any]:
    """MBPP row → ``{question, tests, prompt: '', answer: test program}``."""
    tests = [str(t) for t in row["test_list"]]
    return {"question": row.get("text") or row.get("prompt", ""), "tests": "\n".join(tests),
            "prompt": "", "answer": "\n".join(tests) + "\n"}


class _CodeAdapter(TableAdapter):
    repo_id = ""
    evaluator = "ftagent.tools.opencompass.oc_ext:PythonTestsEvaluator"
    evaluator_kwargs = {"timeout": 10.0}
    postprocessor = "ftagent.tools.opencompass.oc_ext:extract_code"

    def raw_subsets(self, root: Path) -> dict[str, list[dict[str, Any]]]:
        raw = hub_snapshot(self.repo_id, self.bench_dir(root) / "raw")
        paths = sorted(p for p in raw.rglob("test*") if p.suffix in {".parquet", ".jsonl", ".json"})
        return {"default": [r for p in paths[:1] for r in read_table(p)]}


class HumanEvalAdapter(_CodeAdapter):
    """HumanEval: complete the function; the program ``prompt + code + tests`` must exit 0."""

    repo_id = "openai/openai_humaneval"
    spec = BenchmarkSpec(
        key="humaneval", category="code", data_source="hf:openai/openai_humaneval", related_datasets=[],
        prompt=HUMANEVAL_PROMPT, answer_rule="first ```python block (or raw text); run with the tests",
        evaluator="ftagent.tools.opencompass.oc_ext:PythonTestsEvaluator", core_metric="pass@1",
        max_out_len=512, input_columns=["prompt"],
    )

    def to_item(self, row: dict[str, Any], subset: str) -> dict[str, Any]:
        return humaneval_item(row)


class MbppAdapter(_CodeAdapter):
    """MBPP (sanitized test split): write the function so that the asserts pass."""

    repo_id = "google-research-datasets/mbpp"
    spec = BenchmarkSpec(
        key="mbpp", category="code", data_source="hf:google-research-datasets/mbpp", related_datasets=[],
        prompt=MBPP_PROMPT, answer_rule="first ```python block (or raw text); run with the asserts",
        evaluator="ftagent.tools.opencompass.oc_ext:PythonTestsEvaluator", core_metric="pass@1",
        max_out_len=512, input_columns=["question", "tests"],
    )

    def to_item(self, row: dict[str, Any], subset: str) -> dict[str, Any]:
        return mbpp_item(row)
