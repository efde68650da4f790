"""The last ``\\boxed{...}`` of a text: the one reading of a boxed answer on ftagent's side (golds of MATH,
the gold-match check of the feedback). The tool-side OpenCompass extension keeps its own copy
(``tools/opencompass/oc_ext.py``), as it runs inside the tool env."""

from __future__ import annotations

import re

_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")


def last_boxed_content(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` / ``\\fbox{...}`` with balanced braces, or None."""
    starts = [m.end() for m in _OPEN.finditer(text or "")]
    if not starts:
        return None
    i, depth, start = starts[-1], 1, starts[-1]
    while i < len(text) and depth:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    return text[start:i - 1].strip() if depth == 0 else None
