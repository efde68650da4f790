"""Shared pieces of the prompt tests that render the LLM planner's requests through the preview builders
(``tests/unit/test_issue35_*.py``): one fixed machine, the requests' text, a scored experiment."""

from __future__ import annotations

from typing import Any

import pytest

from ftagent.core.trace import Experiment
from ftagent.core.types import Hypothesis
from ftagent.planners.llm import brief, brief_machine


@pytest.fixture(autouse=True)
def fixed_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """2 CPUs, 24 GiB and a 2.3 MB model folder, whatever machine renders the prompt (autouse where imported)."""
    monkeypatch.setattr(brief_machine, "cpu_facts", lambda: (2, 24.0))
    monkeypatch.setattr(brief, "dir_size", lambda path: 2_312_345)


def text_of(preview: Any) -> str:
    """All messages of one preview as one text."""
    return "\n".join(m["content"] for m in preview.messages)


def scored(loop: int, score: float, **extra: Any) -> Experiment:
    """A finished experiment of ``loop`` with validation score ``score``."""
    return Experiment(loop=loop, hypothesis=Hypothesis(hypothesis=f"h{loop}", task=f"t{loop}"), val_score=score,
                      **extra)
