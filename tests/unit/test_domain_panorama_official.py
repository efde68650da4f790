"""PANORAMA extraction read the way the official LGAI-Research/PANORAMA scripts read answers.

Each case was found by the parity corpus (tests/parity/test_domain_panorama.py) and scored
differently by ftagent before the fix.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ftagent.benchmarks.domain import panorama as pan


@pytest.mark.parametrize(("text", "want"), [
    ('{"answer": "A/G"}', None),   # official: one token "A/G", not a letter
    ('{"answer": "(A)"}', None),
    ('{"answer": "A."}', None),
    ('{"answer": "A, G"}', ["A", "G"]),
    ('{"answer": "a g"}', ["A", "G"]),
    ('{"answer": "A and G"}', ["A", "G"]),
])
def test_par4pc_answer_string_is_split_on_commas_and_spaces(text, want):
    assert pan.extract_par4pc(text) == want


def test_par4pc_fork_fallback_still_scans_standalone_letters():
    assert pan.extract_par4pc("Patents (A) and D.", fork_fallback=True) == ["A", "D"]


@pytest.mark.parametrize(("text", "want"), [
    ('{"answer": 9.0}', 9),                     # official int(9.0)
    ('{"answer": 1e1}', 10),
    ('{"answer": " 36 "}', 36),
    ('{"answer": "9.0"}', None),                # int("9.0") raises in the official code too
    ('{"answer": 9', None),                     # cut off: 9 may be the start of 95
    ('{"answer": 9, "reason": "Step1 the', 9),  # cut off after a complete key
])
def test_pi4pc_answer_is_converted_like_int(text, want):
    assert pan.extract_pi4pc(text) == want


@pytest.mark.parametrize(("text", "want"), [
    ('{"Code": "102"}', None),                          # the official reads only "code"
    ('{"code": "102"', "102"),                          # cut off after a complete value
    ('{"code": "allow", "reason": "Regarding Claim', "ALLOW"),
    ('{"code": "10', None),
])
def test_noc4pc_code_key_is_case_sensitive_and_value_complete(text, want):
    assert pan.extract_noc4pc(text) == want


REAL = str(Path(__file__).parents[1] / "fixtures" / "benchmarks" / "panorama" / "real")


@pytest.mark.parametrize("task", ["par4pc", "pi4pc", "noc4pc"])
def test_real_records_load_prompt_and_score(task):
    """Real records (official samples): the loader reads them, the prompt names the key the scorer
    reads, and the gold answer in that format scores full marks; a wrong one scores 0."""
    items = pan.load_items(REAL, task)
    assert len(items) == 2 and items[0]["identifier"].startswith(f"{task}_app")
    for cot in (False, True):
        prompt = pan.build_prompt(task, items[0], cot=cot)
        assert ('"code"' if task == "noc4pc" else '"answer"') in prompt
        assert f"Claim {items[0]['claim_number']}" in prompt
    if task == "par4pc":
        gold = [f'{{"answer": {json.dumps(i["gold_answers"])}}}' for i in items]
        wrong, core = '{"answer": "' + next(k for k in "BCDEFH" if k in items[0]["negative_answers"]) + '"}', "macro_f1"
    elif task == "pi4pc":
        gold = [f'{{"answer": {i["gold_answers"][0]}}}' for i in items]
        wrong, core = f'{{"answer": {items[0]["negative_answers"][0]}}}', "gold_hit_rate"
    else:
        gold = [f'{{"reason": "Regarding Claim 1, ...", "code": "{i["answer"]["code"]}"}}' for i in items]
        wrong, core = '{"code": "ALLOW"}', "accuracy"
    assert pan.METRICS[task](gold, items)[core] == 100.0
    assert pan.METRICS[task]([wrong, wrong], items)[core] == 0.0
