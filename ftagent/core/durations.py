"""Parse human durations: ``12h``, ``90m``, ``1h30m``, ``45s``, ``2d``, or plain seconds."""

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
