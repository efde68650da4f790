"""TableInstruct: table question answering instructions (the training companion of TableBench)."""

from __future__ import annotations

from ftagent.datasets.base import DatasetSpec, FunctionSource


def to_alpaca(dataset_dir, limit=None, seed=0):
    """Alpaca rows from ``TableInstruct_instructions.jsonl``: ready-made instruction → response."""
    import json
    import random
    from pathlib import Path

    rows = []
    for path in sorted(Path(dataset_dir).glob("*.jsonl")):
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    continue
                rec = json.loads(line)
                instruction = (rec.get("instruction") or "").strip()
                response = (rec.get("response") or "").strip()
                if instruction and response:
                    rows.append({"instruction": instruction, "input": "", "output": response})
    random.Random(seed).shuffle(rows)
    return rows if limit is None else rows[:limit]


SOURCE = FunctionSource(
    spec=DatasetSpec(
        name="tableinstruct",
        repo_id="Multilingual-Multimodal-NLP/TableInstruct",
        related_benchmarks=["tablebench", "tablebench_*"],
        task_type="table_qa",
        license="apache-2.0",
        summary="~19.7k table QA instructions (fact checking, numerical reasoning, analysis, charts)",
    ),
    converter=to_alpaca,
)
