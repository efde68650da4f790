"""Parity of demo_add, gsm8k, mmlu and FinanceIQ_gen with their references, and their oracle checks.

References: stock OpenCompass 0.5.4 configs from the tool env (``gsm8k/gsm8k_gen_1d7fe4``, the stock
``gsm8k_gen``; ``mmlu/mmlu_gen_4d595a``, the stock config whose prompt ("…Answer:") ftagent's mmlu uses;
``FinanceIQ/FinanceIQ_gen_e0e6b5``, the reference's FinanceIQ_gen) and, for ftagent's own ``demo_add``,
its documented rule (the last ``\\boxed{}`` integer), written independently in ``core_score.py``.
"""

from __future__ import annotations

import pytest

from tests.parity.core_common import check, check_oracle, oracle_cases, score_corpus
from tests.parity.harness import load_corpus

pytestmark = pytest.mark.integration

STOCK = {
    "demo_add": {"runner": "rule:last_boxed_int"},
    "gsm8k": {"config": "gsm8k/gsm8k_gen_1d7fe4.py", "var": "gsm8k_datasets", "runner": "evaluator"},
    "mmlu": {"config": "mmlu/mmlu_gen_4d595a.py", "var": "mmlu_datasets", "runner": "evaluator"},
    "FinanceIQ_gen": {"config": "FinanceIQ/FinanceIQ_gen_e0e6b5.py", "var": "financeIQ_datasets",
                      "runner": "evaluator"},
}
REFERENCE = {
    "demo_add": "ftagent's documented rule (own benchmark): last \\boxed{} integer",
    "gsm8k": "stock OC gsm8k_gen_1d7fe4: gsm8k_postprocess + gsm8k_dataset_postprocess + Gsm8kEvaluator",
    "mmlu": "stock OC mmlu_gen_4d595a: first_option_postprocess(ABCD) + AccwithDetailsEvaluator",
    "FinanceIQ_gen": "stock OC FinanceIQ_gen_e0e6b5: first_capital_postprocess + AccEvaluator",
}
_OTHER = {"A": "B", "B": "C", "C": "D", "D": "A"}
WRITE = {  # the gold as a model would write it, and a wrong answer in the same style
    "demo_add": (lambda c: f"The sum is \\boxed{{{c['gold']}}}.", lambda c: f"\\boxed{{{int(c['gold']) + 1}}}"),
    "gsm8k": (lambda c: f"Step by step ... The answer is {c['gold']}",
              lambda c: f"Step by step ... The answer is {float(c['gold']) + 1:g}"),
    "mmlu": (lambda c: f"The answer is ({c['gold']}).", lambda c: f"The answer is ({_OTHER[c['gold']]})."),
    "FinanceIQ_gen": (lambda c: f"答案是: {c['gold']}", lambda c: f"答案是: {_OTHER[c['gold']]}"),
}


@pytest.mark.parametrize("key", sorted(STOCK))
def test_answer_benchmarks_parity_and_oracle(key, parity, tools_python, tmp_path):
    oracle = oracle_cases(load_corpus(key), *WRITE[key])
    corpus, result = score_corpus(tools_python, key, tmp_path, STOCK[key], oracle)
    check(parity, key, REFERENCE[key], corpus, result)
    check_oracle(key, oracle, result["oracle"])
