"""Wrong-scored answers that equal their gold: a probable evaluation error, not a model failure (issue 35).

A played planner read a 0 % result as "under-trained" when the model's outputs were the right answers and
only the scorer (or the answer format it requires) disagreed. :func:`gold_matches` compares the outputs of
the wrong validation items the evaluation kept (``EvalResult.error_samples``: ``gold`` and
``model_output``) with their golds after a light normalisation; when a clear majority of them match, the
feedback prompt says so and the workflow records a warning.

The normalisation is deliberately light (an output that *contains* the gold in a sentence, "The answer is
42.", is a format problem of the model and does not match): NFKC, case, surrounding whitespace, quotes,
``$`` and end punctuation, thousands separators, and the content of the last ``\\boxed{…}`` on either side.
So a bare ``42`` matches the gold ``42`` even where the scorer asks for ``\\boxed{42}``: the words shown
name both causes (the scorer, or the answer format).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from ftagent.core.boxed import last_boxed_content

MIN_MATCHES = 2  # fewer matching items are no pattern
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


def normalise_answer(text: Any) -> str:
    """The answer as compared: the last ``\\boxed{}`` content if any, NFKC, case-folded, spaces collapsed,
    thousands separators and surrounding quotes, ``$`` and end punctuation removed."""
    value = str(text if text is not None else "")
    boxed = last_boxed_content(value)
    if boxed is not None:
        value = boxed
    value = _THOUSANDS.sub("", unicodedata.normalize("NFKC", value).casefold())
    return " ".join(value.strip().strip("$`'\" \t\n.。!,;:").split())


class GoldMatch(BaseModel):
    """How many wrong-scored outputs equal their gold."""

    matched: int
    compared: int  # wrong items with both a gold and an output
    boxed: int = 0  # of the matched: outputs that hold the answer inside \\boxed{} (the others are bare)
    examples: list[str] = []  # a few matching golds, as normalised

    def text(self) -> str:
        return (f"{self.matched} of the {self.compared} wrong-scored validation items shown have a model output "
                "equal to the gold answer after normalisation (case, spaces, surrounding punctuation, the "
                f"content of \\boxed{{}}); {self.boxed} of them hold it inside \\boxed{{}}, "
                f"{self.matched - self.boxed} are the bare answer")


def gold_matches(samples: Iterable[Mapping[str, Any]]) -> GoldMatch | None:
    """A :class:`GoldMatch` when a clear majority (more than half, at least :data:`MIN_MATCHES`) of the
    wrong-scored ``samples`` have an output equal to their gold; else None."""
    compared, matched, boxed = 0, 0, 0
    examples: list[str] = []
    for sample in samples:
        gold, output = normalise_answer(sample.get("gold")), normalise_answer(sample.get("model_output"))
        if not gold or not output:
            continue
        compared += 1
        if gold == output:
            matched += 1
            boxed += last_boxed_content(str(sample.get("model_output") or "")) is not None
            if len(examples) < 3:
                examples.append(gold[:60])
    if matched >= MIN_MATCHES and 2 * matched > compared:
        return GoldMatch(matched=matched, compared=compared, boxed=boxed, examples=examples)
    return None
