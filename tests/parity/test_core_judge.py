"""aime25's LLM judge sees the model's raw output, as in stock's ``CascadeEvaluator``.

Stock ``aime2025_cascade_eval_gen_5e9f4f`` has no dataset post-processor: the rule stage
(``MATHVerifyEvaluator``) and the judge both get the prediction as generated (after the model-level
thinking step). ftagent used to extract the boxed answer first (``math_postprocess_v2``), so the judge
graded ``\\text{seventy}`` instead of the sentence around it. The judge here is the repository's fake
OpenAI server; the real cascade (OpenCompass 0.5.4) runs in the tool env.
"""

from __future__ import annotations

import json

import pytest

from tests.fakes.openai_server import FakeOpenAIServer
from tests.parity.core_common import ours_config
from tests.parity.harness import HERE, run_in_tools

pytestmark = pytest.mark.integration

RULE_HIT = "The sum of the bases is $21 + 49 = \\boxed{70}$."
RULE_MISS = ("<think>\nBases 21 and 49.\n</think>\n\nBoth bases work, 21 and 49, so the sum of all such bases is "
             "seventy, which I write as \\boxed{\\text{seventy}}.")


def test_aime25_judge_gets_the_raw_prediction(tools_python, tmp_path, monkeypatch):
    with FakeOpenAIServer() as srv:
        srv.queue("A")
        # a tiktoken-known name: OpenAISDK counts prompt tokens with tiktoken for those, else it fetches an HF
        # tokenizer of that name from the Hub
        judge = {"model": "gpt-4", "key_env": "ENV", "api_base": srv.base_url + "/", "retry": "1"}
        config = ours_config("aime25", tmp_path, judge=judge)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-judge")
        cases = [{"output": out, "question": "Find the sum of all integer bases b > 9 ...", "gold": "70"}
                 for out in (RULE_HIT, RULE_MISS)]
        result = run_in_tools(tools_python, HERE / "core_judge.py",
                              {"config": str(config), "work": str(tmp_path), "cases": cases})
        sent = [json.dumps(r.body, ensure_ascii=False) for r in srv.chat_requests]
    assert result["correct"] == [True, True]  # rule hit; rule miss → the judge's "A"
    assert len(sent) == 1  # only the rule miss reaches the judge
    raw = RULE_MISS.split("</think>\n\n")[1]  # what stock's model-level step leaves
    assert result["predictions"][1] == raw
    assert json.dumps(raw, ensure_ascii=False)[1:-1] in sent[0]
    assert "Bases 21 and 49." not in sent[0]  # the thinking is not graded
