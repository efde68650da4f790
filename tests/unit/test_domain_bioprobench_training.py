"""BioProBench training rows use the evaluation prompts (the official wording) and a scorable target."""

import json

from ftagent.benchmarks.domain import bioprobench as bio
from ftagent.datasets import bioprobench

ROWS = {
    "PQA": {"question": "Centrifuge the tubes at ____ rpm for 5 min.", "answer": "1,400",
            "choices": ["1,200", "1,300", "1,500", "1,400", "1,600"], "type": "operation", "id": "PQA-1"},
    "ERR": {"context": {"purpose": "Lyse cells.", "prior_step": "Collect cells.", "next_step": "Spin."},
            "corrupted_text": "Add 500 mL buffer.", "corrected_text": "Add 500 uL buffer.", "is_correct": False,
            "type": "parameter", "error_description": "volume", "id": "ERR-1"},
    "ORD": {"question": "Please sort the following steps titled 'Lysis' in the correct order.",
            "wrong_steps": ["Spin.", "Add buffer.", "Collect cells."],
            "correct_steps": ["Collect cells.", "Add buffer.", "Spin."], "type": "top", "id": "ORD-1"},
    "GEN": {"system_prompt": "You are a lab assistant.", "instruction": "Write the protocol steps.",
            "input": "Title: Cell lysis", "output": ["1. Collect cells.", "2. Spin down."], "id": "GEN-1"},
}


def test_training_prompts_are_the_evaluation_prompts_and_targets_score_full(tmp_path):
    for task, row in ROWS.items():
        (tmp_path / f"{task}.json").write_text(json.dumps([row]), encoding="utf-8")
    rows = bioprobench.to_alpaca(tmp_path)
    assert len(rows) == 4
    by_prompt = {r["instruction"]: r["output"] for r in rows}
    for task, row in ROWS.items():
        target = by_prompt[bio.build_prompt(task, row)]
        m = bio.METRICS[task]([target], [bio.reference(task, row)])
        core = {"PQA": "accuracy", "ERR": "accuracy", "ORD": "exact_match", "GEN": "ROUGE-L"}[task]
        assert m[core] == 100.0 and m.get("failed", 0) == 0, (task, m)
