"""Tool-env script: run ftagent's rendered aime25 cascade (rule + LLM judge) on a few outputs.

Payload: ``{"config": "<rendered config.py>", "work": "<dir>", "cases": [{"output", "question", "gold"}]}``.
The judge is whatever ``judge_cfg`` the config names (the test points it at the fake OpenAI server).
The predictions go through the config's model step and dataset post-processor (if any), exactly as
``OpenICLEvalTask`` sends them to the evaluator. Prints ``{"correct": [bool...], "predictions": [...]}``.
"""

from __future__ import annotations

import json
import os
import sys

from datasets import Dataset
from mmengine.config import Config

from tests.parity.core_score import _apply, _evaluator


class _WordCounter:
    """Offline stand-in for tiktoken's ``cl100k_base`` (a download): OpenCompass's ``OpenAISDK`` only
    counts prompt tokens with it to respect ``max_seq_len``; it does not change what is sent."""

    def encode(self, text: str, **_: object) -> list[str]:
        return text.split()

    def decode(self, tokens: list[str]) -> str:
        return " ".join(tokens)


def _offline_token_counting() -> None:
    import tiktoken

    tiktoken.encoding_for_model = lambda *a, **k: _WordCounter()
    tiktoken.get_encoding = lambda *a, **k: _WordCounter()


def main() -> None:
    _offline_token_counting()
    payload = json.loads(sys.stdin.read())
    cfg = Config.fromfile(payload["config"])
    eval_cfg = cfg["datasets"][0]["eval_cfg"]
    model_step = cfg["models"][0].get("pred_postprocessor")
    cases = payload["cases"]
    preds = [_apply(eval_cfg.get("pred_postprocessor"), _apply(model_step, c["output"])) for c in cases]
    evaluator = _evaluator(eval_cfg["evaluator"])
    evaluator._out_dir = os.path.join(payload["work"], "results", "aime25")
    test_set = Dataset.from_list([{"question": c["question"], "answer": c["gold"]} for c in cases])
    result = evaluator.score(predictions=preds, references=[c["gold"] for c in cases], test_set=test_set)
    correct = [bool(d.get("cascade_correct", d.get("correct"))) for d in result["details"]]
    print(json.dumps({"correct": correct, "predictions": preds}))


if __name__ == "__main__":
    main()
