"""DeepScaleR-Preview: ~40k competition-math problems (AIME, AMC, Omni-MATH, STILL)."""

from __future__ import annotations

from ftagent.datasets.base import DatasetSpec, FunctionSource


def to_alpaca(dataset_dir, limit=None, seed=0):
    """Alpaca rows from ``deepscaler.json``: problem → solution (or a boxed answer when empty)."""
    import json
    import random
    from pathlib import Path

    path = Path(dataset_dir) / "deepscaler.json"
    text = path.read_text(encoding="utf-8").strip()
    records = json.loads(text) if text.startswith("[") else [json.loads(x) for x in text.splitlines() if x.strip()]
    rows = []
    for rec in records:
        problem = (rec.get("problem") or "").strip()
        answer = str(rec.get("answer") or "").strip()
        if not problem or not answer:
            continue
        solution = (rec.get("solution") or "").strip()
        if solution and "\\boxed" not in solution:
            solution += f"\n\nThe final answer is $\\boxed{{{answer}}}$."
        output = solution or f"The final answer is $\\boxed{{{answer}}}$."
        rows.append({"instruction": problem + "\nPut your final answer within \\boxed{}.",
                     "input": "", "output": output})
    random.Random(seed).shuffle(rows)
    return rows if limit is None else rows[:limit]


SOURCE = FunctionSource(
    spec=DatasetSpec(
        name="deepscaler",
        repo_id="agentica-org/DeepScaleR-Preview-Dataset",
        related_benchmarks=["aime24", "aime25", "math", "math_*", "gsm8k"],
        task_type="math",
        license="MIT",
        summary="~40k competition math problems with final answers; most have no written solution",
    ),
    converter=to_alpaca,
)
