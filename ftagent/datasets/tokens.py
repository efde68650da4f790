"""Token counting for dataset statistics, offline.

With the base model's ``tokenizer.json`` the count is exact (``tokenizers`` reads the file; nothing is
downloaded). Without it the count is an approximation: one token per CJK/kana/hangul character plus
``ceil(n/4)`` for the remaining characters (about four Latin characters per BPE token).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Protocol

_WIDE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]")


class TokenCounter(Protocol):
    """Counts tokens in a string; ``name`` is recorded in the catalogue."""

    name: str

    def count(self, text: str) -> int:
        """Number of tokens in ``text``."""


class ApproxCounter:
    """1 token per wide (CJK) character + ceil(other characters / 4)."""

    name = "approx:cjk1+chars/4"

    def count(self, text: str) -> int:
        """Approximate token count."""
        if not text:
            return 0
        wide = len(_WIDE.findall(text))
        return wide + math.ceil((len(text) - wide) / 4)


class HFTokenizerCounter:
    """Exact counts with a ``tokenizer.json`` (no special tokens added)."""

    def __init__(self, tokenizer_file: Path) -> None:
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_file(str(tokenizer_file))
        self.name = f"tokenizer:{Path(tokenizer_file).parent.name}"

    def count(self, text: str) -> int:
        """Exact token count."""
        return len(self._tok.encode(text, add_special_tokens=False).ids) if text else 0


def load_token_counter(model_dir: Path | None = None) -> TokenCounter:
    """The model's tokenizer when ``model_dir/tokenizer.json`` loads, else :class:`ApproxCounter`."""
    if model_dir is not None and (Path(model_dir) / "tokenizer.json").is_file():
        try:
            return HFTokenizerCounter(Path(model_dir) / "tokenizer.json")
        except Exception:  # a tokenizer file this `tokenizers` cannot read: fall back, stats stay usable
            return ApproxCounter()
    return ApproxCounter()
