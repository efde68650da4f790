"""Durations for people: parse ``12h``, ``90m``, ``1h30m``, ``45s``, ``2d`` or plain seconds; format them back."""

from __future__ import annotations

import re

from ftagent.core.errors import UserInputError

_UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_PART = re.compile(r"(\d+(?:\.\d+)?)([dhms])")
_PLAIN = re.compile(r"\d+(?:\.\d+)?")


def parse_duration(text: str) -> float:
    """Return the duration in seconds.

    Units may be combined in decreasing order (``1h30m``). Zero and negative durations are rejected.

    Raises:
        UserInputError: on anything else (``12x``, ``-1h``, ``h``, ``30m1h``).
    """
    raw = text.strip().lower()
    if _PLAIN.fullmatch(raw):
        seconds = float(raw)
    else:
        parts = _PART.findall(raw)
        units = [u for _, u in parts]
        ordered = sorted(units, key=lambda u: -_UNIT_SECONDS[u])
        if not parts or "".join(n + u for n, u in parts) != raw or units != ordered or len(set(units)) != len(units):
            raise UserInputError(
                f"invalid timeout '{text}': use e.g. 12h, 90m, 1h30m, 45s or plain seconds"
            )
        seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
    if seconds <= 0:
        raise UserInputError(f"invalid timeout '{text}': it must be greater than zero")
    return seconds


def format_duration(seconds: float | None) -> str:
    """A duration for people (prompts, progress lines): ``5400`` → ``1 h 30 min``; ``604800`` → ``7 days``; ``45`` → ``45 s``."""
    if seconds is None:
        return "no limit"
    s = int(round(seconds))
    if s >= 2 * 86400 and s % 86400 == 0:
        return f"{s // 86400} days"
    if s >= 3600:
        h, m = divmod(s // 60, 60)
        return f"{h} h" + (f" {m} min" if m else "")
    if s >= 60:
        m, sec = divmod(s, 60)
        return f"{m} min" + (f" {sec} s" if sec else "")
    return f"{s} s"
