"""BioProBench: biological protocol tasks (PQA, ERR, ORD, GEN).

The hub copy holds the benchmark's own ``<TASK>_test.json`` next to the training files; the
post-download hook deletes them so no test item can reach training data.
"""

from __future__ import annotations

from pathlib import Path

from ftagent.datasets.base import DatasetSpec, FunctionSource
from ftagent.datasets.panorama import remove_eval_splits


def remove_test_files(dataset_dir: Path) -> list[str]:
    """Post-download hook: delete ``*_test.json`` (and any other test/validation-named file)."""
    return remove_eval_splits(dataset_dir)


def to_alpaca(dataset_dir, limit=None, seed=0):
    """Alpaca rows from PQA/ERR/ORD/GEN ``.json`` in the benchmark's ``[ANSWER_START]...[ANSWER_END]`` format."""
    import json
    import random
    from pathlib import Path

    def tag(text):
        return f"[ANSWER_START]{text}[ANSWER_END]"

    def pqa(r):
        prompt = ("Choose exactly one option from the Choices to fill the blank. Answer as "
                  "[ANSWER_START]<option text> & <confidence 0-100>%[ANSWER_END].\n"
                  f"Question:\n{r['question']}\nChoices:\n{r['choices']}")
        return prompt, tag(f"{r['answer']} & 90%")

    def err(r):
        step = r["corrected_text"] if r["is_correct"] else r["corrupted_text"]
        prompt = ("Is the following protocol step True (correct) or False (contains an error)? Context: "
                  f"{r['context']}\nStep: {step}\nAnswer True or False inside [ANSWER_START][ANSWER_END].")
        return prompt, tag("True" if r["is_correct"] else "False")

    def ord_(r):
        wrong = list(r["wrong_steps"])
        order = [wrong.index(s) for s in r["correct_steps"]]
        prompt = (f"{r['question']}\nThe steps are:\n{wrong}\nGive the correct order as a list of the "
                  "original indices (from 0) inside [ANSWER_START][ANSWER_END].")
        return prompt, tag(str(order))

    def gen(r):
        prompt = (f"{r.get('system_prompt', '')}\n{r['instruction']}\nPut the steps between "
                  f"[ANSWER_START] and [ANSWER_END], one step per line.\n{r.get('input', '')}").strip()
        steps = r["output"] if isinstance(r["output"], list) else [str(r["output"])]
        return prompt, tag("\n".join(steps))

    builders = {"PQA": pqa, "ERR": err, "ORD": ord_, "GEN": gen}
    rows = []
    for task, build in builders.items():
        path = Path(dataset_dir) / f"{task}.json"
        if not path.exists():
            continue
        for rec in json.loads(path.read_text(encoding="utf-8")):
            try:
                prompt, output = build(rec)
            except (KeyError, ValueError, TypeError):
                continue
            rows.append({"instruction": prompt, "input": "", "output": output})
    random.Random(seed).shuffle(rows)
    return rows if limit is None else rows[:limit]


SOURCE = FunctionSource(
    spec=DatasetSpec(
        name="bioprobench",
        repo_id="bowenxian/BioProBench",
        related_benchmarks=["bioprobench", "bioprobench_*"],
        task_type="biology protocols",
        license="CC BY 4.0 (HF card) / CC BY-NC 4.0 (GitHub): unsettled",
        summary="protocol QA, error detection, step ordering and protocol generation",
        hook_description="*_test.json (the benchmark's test sets) deleted from the training copy",
        # the four task files the converter reads; not the test files nor the ~175 MB of raw protocol corpora
        allow_patterns=["PQA.json", "ERR.json", "ORD.json", "GEN.json", "README.md"],
    ),
    converter=to_alpaca,
    hook=remove_test_files,
)
