"""Code benchmark helpers (``humaneval``, ``mbpp``: configs/benchmarks/*.yaml), scored by pass@1.

Published layouts: HumanEval (``openai/openai_humaneval``) rows ``{"task_id", "prompt",
"canonical_solution", "test", "entry_point"}``; MBPP (``google-research-datasets/mbpp``) rows
``{"task_id", "text", "code", "test_list": [...]}``. The gold column ``answer`` holds the test program
the extracted code must pass (``ftagent.tools.opencompass.oc_ext:PythonTestsEvaluator``, one subprocess per
sample with a timeout).
"""

from __future__ import annotations

from typing import Any


def humaneval_item(row: dict[str, Any]) -> dict[str, Any]:
    """HumanEval row → ``{prompt, entry_point, answer: test program}``."""
    test = f"{row['test']}\n\ncheck({row['entry_point']})\n"
    return {"prompt": row["prompt"], "entry_point": row["entry_point"], "answer": test}


def mbpp_item(row: dict[str, Any]) -> dict[str, Any]:
    """MBPP row → ``{question, tests, prompt: '', answer: test program}``."""
    tests = [str(t) for t in row["test_list"]]
    return {"question": row.get("text") or row.get("prompt", ""), "tests": "\n".join(tests),
            "prompt": "", "answer": "\n".join(tests) + "\n"}


def humaneval_row(row: dict[str, Any], subset: str, bench: Any) -> dict[str, Any]:
    """Item transform ``humaneval``."""
    return humaneval_item(row)


def mbpp_row(row: dict[str, Any], subset: str, bench: Any) -> dict[str, Any]:
    """Item transform ``mbpp``."""
    return mbpp_item(row)
