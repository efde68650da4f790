"""The benchmark's own scorer on training answers (issue 40), imported inside the tool env ONLY.

Standalone like :mod:`.oc_ext`: OpenCompass and the standard library, never ftagent's core. Two users:

* the sampling step's OpenCompass run scores each sampled answer against its training gold with the
  benchmark's evaluator; the gold goes through :func:`gold_as_answer` (``dataset_postprocessor``) first;
* the GRPO stage's reward (:class:`AnswerScorer`, called by ``ftagent/tools/trl/grpo_script.py``) scores
  each completion the same way: the model-level step every evaluation applies (``extract-non-reasoning-content``:
  a closed ``<think>…</think>`` dropped), the benchmark's answer post-processor, its evaluator's ``score``.

A training gold is an answer as the data script wrote it (``\\boxed{84}``, ``The answer is B``): it is read
as the benchmark reads a reply (the post-processor's extraction), unless that extraction is empty, when the
gold is compared as written (a benchmark without an extractor, a plain gold).
"""

from __future__ import annotations

import importlib
from typing import Any

from opencompass.registry import TEXT_POSTPROCESSORS

THINK_STEP = "extract-non-reasoning-content"  # the model-level post-processor of every rendered model block


def load_component(ref: str | None) -> Any:
    """``"module:Name"`` (a resolved evaluator or post-processor reference) → the object; None → None."""
    if not ref:
        return None
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


@TEXT_POSTPROCESSORS.register_module("ftagent_gold_as_answer")
def gold_as_answer(text: str, postprocessor: str | None = None, **kwargs: Any) -> str:
    """A training gold read as the benchmark reads a reply: ``postprocessor`` ("module:Name") applied, its
    result when it found an answer, else the gold as written."""
    proc = load_component(postprocessor)
    text = "" if text is None else str(text)
    if proc is None:
        return text
    found = proc(text, **kwargs)
    return found if isinstance(found, str) and found.strip() else text


_TRUE = {"A", "CORRECT", "TRUE", "YES", "1"}  # ftagent.tools.opencompass.parse._TRUE


def _truthy(value: Any) -> bool:
    if isinstance(value, list):
        return bool(value) and all(_truthy(v) for v in value)
    if isinstance(value, str):
        return value.strip().upper() in _TRUE
    return bool(value)


def is_correct(detail: dict[str, Any]) -> float:
    """One evaluator detail as a reward in [0, 1]: its correctness flag (the fields ftagent's
    ``parse.is_correct`` reads, in its order and with its truth rule), else a domain evaluator's 0-100
    ``score``; 0 otherwise."""
    for key in ("cascade_correct", "correct", "is_correct", "exact_match"):
        if key in detail:
            return float(_truthy(detail[key]))
    score = detail.get("score")
    if isinstance(score, (int, float)) and not isinstance(score, bool) and 0 <= score <= 100:
        return float(score) / 100.0
    return 0.0


class AnswerScorer:
    """Scores completions against training golds exactly as the sampling step's evaluation does.

    ``spec``: the reward spec the system resolved from the benchmark (``evaluator``/``postprocessor``
    references and their keyword arguments; ``ftagent.core.types.RewardSpec``).
    """

    def __init__(self, spec: dict[str, Any]) -> None:
        self.evaluator = load_component(spec["evaluator"])(**(spec.get("evaluator_kwargs") or {}))
        self.postprocessor = spec.get("postprocessor")
        self.post_kwargs = dict(spec.get("postprocessor_kwargs") or {})
        self.post = load_component(self.postprocessor)
        self.think = TEXT_POSTPROCESSORS.get(THINK_STEP)

    def answer(self, completion: str) -> str:
        """A completion as the benchmark's evaluation reads it."""
        text = self.think(completion) if self.think is not None else completion
        return self.post(text, **self.post_kwargs) if self.post is not None else text

    def extracted(self, completion: str) -> bool:
        """Whether the benchmark's post-processor finds an answer (the optional format reward); True
        for a benchmark without one (every reply is its own answer)."""
        return self.post is None or bool(str(self.answer(completion)).strip())

    def score(self, completions: list[str], golds: list[str]) -> list[float]:
        """One reward in [0, 1] per completion (the evaluator's per-item verdict)."""
        preds = [self.answer(c) for c in completions]
        refs = [gold_as_answer(g, self.postprocessor, **self.post_kwargs) for g in golds]
        result = self.evaluator.score(preds, refs)
        details = result.get("details") if isinstance(result, dict) else None
        if not isinstance(details, list) or len(details) != len(preds):
            raise ValueError(f"the benchmark's evaluator gave no per-item details: {str(result)[:300]}")
        return [is_correct(d) if isinstance(d, dict) else 0.0 for d in details]
