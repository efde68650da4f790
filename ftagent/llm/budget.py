"""Prompt token budget: count tokens offline and fit a prompt by dropping whole sections.

Tokens are counted with OpenAI's ``cl100k_base`` encoding, read from the copy LiteLLM ships (no
download); without it the count is ``ceil(characters / 4)``. The count is a planner-side measure, so
it is the same whichever model answers: budgets are portable between providers, and the number is
recorded with every call next to the server's own ``prompt_tokens``.

A prompt is a list of :class:`Section` objects. :func:`fit_sections` keeps the required ones and
drops the optional ones by rising ``priority`` (least useful first) until the whole prompt fits;
a section is never cut in the middle. What was dropped is listed in the prompt's last line, so the
reader knows it exists.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

if TYPE_CHECKING:
    import tiktoken

DEFAULT_BUDGET = 24_000  # fits a 32k-context model with room for the reply


@lru_cache(maxsize=1)
def _encoding() -> tiktoken.Encoding | None:
    """cl100k_base from LiteLLM's bundled file, or None (then the estimate is used)."""
    try:
        spec = importlib.util.find_spec("litellm")
        import tiktoken
        from tiktoken.load import load_tiktoken_bpe
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "litellm_core_utils" / "tokenizers"
    # tiktoken names its cache file by the sha1 of the download URL; this is cl100k_base
    bpe = folder / "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"
    if not bpe.is_file():
        return None
    try:
        ranks = load_tiktoken_bpe(str(bpe))
        pat = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
        special = {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
                   "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276}
        return tiktoken.Encoding(name="cl100k_base", pat_str=pat, mergeable_ranks=ranks, special_tokens=special)
    except Exception:  # noqa: BLE001 - a broken file: fall back to the estimate
        return None


def count_tokens(text: str) -> int:
    """Tokens of ``text`` (cl100k_base when available, else ``ceil(len / 4)``)."""
    if not text:
        return 0
    enc = _encoding()
    if enc is None:
        return math.ceil(len(text) / 4)
    return len(enc.encode(text, disallowed_special=()))


def counter_name() -> str:
    """Which counter :func:`count_tokens` uses (recorded with each call)."""
    return "cl100k_base" if _encoding() is not None else "chars/4"


def message_tokens(messages: list[dict[str, Any]]) -> int:
    """Tokens of a chat request: every message's content plus ~4 tokens of framing each."""
    return sum(count_tokens(str(m.get("content") or "")) + 4 for m in messages)


class Section(BaseModel):
    """One titled part of a prompt.

    ``priority``: higher is more useful; ``required`` sections are never dropped.
    """

    key: str
    title: str
    body: str
    priority: int = 50
    required: bool = False
    level: int = 1  # markdown heading level of the title
    fallback: str = ""  # a shorter body used before the section is dropped altogether

    def render(self) -> str:
        if not self.title:
            return self.body.strip()
        return f"{'#' * self.level} {self.title}\n{self.body.strip()}"


class Fitted(BaseModel):
    """A fitted prompt: the text, its tokens and what was dropped to make it fit."""

    text: str
    tokens: int
    budget: int
    dropped: list[str] = []

    @property
    def over_budget(self) -> bool:
        return self.tokens > self.budget


def join_sections(sections: list[Section]) -> str:
    """The sections as one prompt (blank line between them, empty ones skipped)."""
    return "\n\n".join(s.render() for s in sections if s.body.strip() or not s.title).strip() + "\n"


def fit_sections(sections: list[Section], budget: int, *, extra_tokens: int = 0,
                 count: Callable[[str], int] = count_tokens) -> Fitted:
    """Drop optional sections (lowest ``priority`` first, later ones first on ties) until it fits.

    Args:
        sections: the prompt in order.
        budget: token budget for the whole request.
        extra_tokens: tokens of the request outside these sections (e.g. the system message).
        count: the token counter.

    Returns:
        The fitted prompt; it can still be over budget when the required sections alone exceed it.
    """
    kept = [s for s in sections if s.body.strip() or not s.title]
    dropped: list[str] = []
    shortened: list[str] = []

    def render() -> tuple[str, int]:
        notes = []
        if shortened:
            notes.append(f"shortened to fit the prompt budget: {', '.join(shortened)}")
        if dropped:
            notes.append(f"Left out to fit the prompt budget: {', '.join(dropped)}")
        text = join_sections(kept) + "".join(f"\n({n}.)\n" for n in notes)
        return text, count(text) + extra_tokens

    text, tokens = render()
    order = sorted((s for s in kept if not s.required), key=lambda s: (s.priority, -kept.index(s)))
    for victim in order:  # first pass: the least useful sections get their shorter form, or go
        if tokens <= budget:
            break
        i = kept.index(victim)
        if victim.fallback:
            kept[i] = victim.model_copy(update={"body": victim.fallback, "fallback": ""})
            shortened.append(victim.title or victim.key)
        else:
            kept.pop(i)
            dropped.append(victim.title or victim.key)
        text, tokens = render()
    for victim in sorted((s for s in kept if not s.required), key=lambda s: (s.priority, -kept.index(s))):
        if tokens <= budget:  # second pass: the shortened ones go too, least useful first
            break
        kept.remove(victim)
        dropped.append(victim.title or victim.key)
        text, tokens = render()
    return Fitted(text=text, tokens=tokens, budget=budget, dropped=dropped)
