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

    # the benchmark's own prompts (the official Scripts/prompt_format.py wording, as the evaluation
    # prompts of the bioprobench benchmark keys), so training sees exactly what is evaluated
    fmt = "- Output your answer *wrapped exactly* between the tags [ANSWER_START] and [ANSWER_END].\n"

    def pqa(r):
        prompt = ("\nYou will be given a multiple-choice question related to a biological protocol. The blank in "
                  "the question (represented as '____') indicates where the correct choice should be filled in.\n\n"
                  f"Question:\n{r['question']}\n\nChoices:\n{r['choices']}\n\n"
                  "Your task:\n- Choose the most likely correct answer from the given choices.\n"
                  "- You must always select *one* answer, even if you are unsure.\n"
                  "- The selected answer must match one of the choices exactly (including case and punctuation).\n"
                  "- Assign a confidence score between 0 and 100 based on your certainty.\n" + fmt +
                  "- The format of your response must be:\n"
                  "[ANSWER_START]your selected choice & your confidence score[ANSWER_END]\n")
        return prompt, tag(f"{r['answer']} & 90%")

    def err(r):
        step = r["corrected_text"] if r["is_correct"] else r["corrupted_text"]
        prompt = ("Determine whether the following target step in a protocol is True or False:\n"
                  f"{step}\n\nYou may use the following context, which includes the purpose of the step, as well "
                  "as the preceding and following steps, to inform your decision:\n"
                  f"{r['context']}\n\nPlease carefully evaluate if the step is logically consistent, "
                  "necessary, and accurate in the context. If you find anything wrong, answer False.\n\n"
                  "- Please respond with only True or False, without any additional explanation.\n" + fmt +
                  "- The format of your response must be:\n[ANSWER_START]True or False[ANSWER_END]\n")
        return prompt, tag("True" if r["is_correct"] else "False")

    def ord_(r):
        wrong = list(r["wrong_steps"])
        order = [wrong.index(s) for s in r["correct_steps"]]
        prompt = (f"\n{r['question']}\nThe steps are:\n{wrong}\n\n"
                  "- Give me the correct order of the steps as a list of their original indices (start from 0), "
                  "no other words.\n" + fmt +
                  "- The format of your response must be:\n[ANSWER_START]a list of the original indices[ANSWER_END]\n")
        return prompt, tag(str(order))

    def gen(r):
        prompt = (f"{r.get('system_prompt', '')}\n{r.get('instruction', '')}\n"
                  f"Format requirements:\n- Each step must be on a separate line.\n\n{r.get('input', '')}")
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
