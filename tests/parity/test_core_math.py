"""Parity of aime24, aime25 and math with stock OpenCompass, and their oracle checks.

Stock (OpenCompass 0.5.4, the tool env): ``aime2024/aime2024_gen_17d799`` (the reference's aime24),
``aime2025/aime2025_cascade_eval_gen_5e9f4f`` (aime25: its rule stage; the judge is tested in
``test_core_judge.py``) and ``math/math_500_gen`` (MATH-500, the rows ftagent's ``math`` reads): no
dataset post-processor, ``MATHVerifyEvaluator``.
"""

from __future__ import annotations

import pytest

from tests.parity.core_common import check, check_oracle, oracle_cases, score_corpus
from tests.parity.harness import load_corpus

pytestmark = pytest.mark.integration

STOCK = {
    "aime24": {"config": "aime2024/aime2024_gen_17d799.py", "var": "aime2024_datasets", "runner": "evaluator"},
    "aime25": {"config": "aime2025/aime2025_cascade_eval_gen_5e9f4f.py", "var": "aime2025_datasets",
               "runner": "cascade_rule"},
    "math": {"config": "math/math_500_gen.py", "var": "math_datasets", "runner": "evaluator"},
}
REFERENCE = {
    "aime24": "stock OC aime2024_gen_17d799: MATHVerifyEvaluator",
    "aime25": "stock OC aime2025_cascade_eval_gen_5e9f4f: CascadeEvaluator's rule (MATHVerifyEvaluator)",
    "math": "stock OC math_500_gen: MATHVerifyEvaluator",
}


def _wrong(case):
    gold = str(case["gold"])
    return f"The answer is $\\boxed{{{gold}+1}}$." if not gold.isdigit() else f"So the answer is \\boxed{{{int(gold) + 1}}}."


@pytest.mark.parametrize("key", sorted(STOCK))
def test_math_family_parity_and_oracle(key, parity, tools_python, tmp_path):
    corpus = load_corpus(key)
    oracle = oracle_cases(corpus, lambda c: f"Reasoning step by step ... so the final answer is "
                                            f"$\\boxed{{{c['gold']}}}$.", _wrong)
    corpus, result = score_corpus(tools_python, key, tmp_path, STOCK[key], oracle)
    check(parity, key, REFERENCE[key], corpus, result)
    check_oracle(key, oracle, result["oracle"])
