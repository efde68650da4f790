"""LLM dataset selection: which registered raw datasets to prepare for a benchmark.

The rule (:func:`ftagent.datasets.registry.resolve_dataset_choice`) decides whenever it can: ``--dataset``
given, or exactly one dataset related to the benchmark. Otherwise (a user benchmark with no related
dataset, or several candidates) and with an LLM configured, the LLM picks from every registered
dataset's offline description; an unusable answer (no reply, unknown names, nothing chosen) falls
back to the rule.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ftagent.datasets.prepare import (
    DatasetCandidate,
    dataset_candidates,
    selection_is_ambiguous,
)
from ftagent.datasets.registry import resolve_dataset_choice
from ftagent.planners.llm.templates import render


class SelectionReply(BaseModel):
    """What the selection call returns."""

    datasets: list[str] = []
    reason: str = ""


class Selection(BaseModel):
    """The chosen datasets and how they were chosen."""

    datasets: list[str]
    source: str  # "rule" | "llm"
    reason: str = ""


def selection_messages(benchmark: str, description: str, candidates: list[DatasetCandidate],
                       rule: list[str]) -> list[dict[str, str]]:
    """The selection request (benchmark facts and the candidates' descriptions only)."""
    return [{"role": "user", "content": render("dataset_selection", benchmark=benchmark, description=description,
                                               candidates=candidates, rule=rule)}]


def select_datasets(benchmark: str, description: str, *, related: list[str], dataset: str | None = None,
                    client: Any = None) -> Selection:
    """The datasets to prepare for ``benchmark``.

    Args:
        benchmark: the benchmark key.
        description: its description (what the model must learn).
        dataset: ``--dataset`` (a name or 'all'); when given, the rule decides.
        client: an :class:`~ftagent.llm.client.LLMClient`; None = the rule decides.
        related: the resolved benchmark spec's ``related_datasets``.
    """
    rule = resolve_dataset_choice(dataset, benchmark, related)
    if client is None or not selection_is_ambiguous(dataset, benchmark, related):
        return Selection(datasets=rule, source="rule")
    from ftagent.llm.client import LLMCallError

    candidates = dataset_candidates()
    known = {c.name for c in candidates}
    try:
        reply = client.chat_json(selection_messages(benchmark, description, candidates, rule), SelectionReply,
                                 stage="dataset_selection")
    except LLMCallError as exc:
        return Selection(datasets=rule, source="rule", reason=f"the LLM gave no usable answer: {exc.message[:200]}")
    chosen = [n for n in dict.fromkeys(reply.datasets) if n in known]
    if not chosen and reply.datasets:
        return Selection(datasets=rule, source="rule", reason=f"the LLM named unknown datasets: {reply.datasets[:5]}")
    return Selection(datasets=chosen, source="llm", reason=reply.reason)
