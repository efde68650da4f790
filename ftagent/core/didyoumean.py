"""The one did-you-mean of ftagent (registries, run files, tasks.json, validation messages): difflib's closest
match above a similarity bar. It imports nothing of ftagent, so every core module may use it."""

from __future__ import annotations

import difflib

# difflib's own default: at 0.5 an unrelated key got a hint ('nope_bench' -> 'bioprobench_pqa', ratio 0.56)
DID_YOU_MEAN_CUTOFF = 0.6


def closest(name: str, options: list[str] | tuple[str, ...]) -> str | None:
    """The valid option closest to ``name``, or None when none is close (similarity >= 0.6)."""
    close = difflib.get_close_matches(name, list(options), n=1, cutoff=DID_YOU_MEAN_CUTOFF)
    return close[0] if close else None


def did_you_mean(name: str, options: list[str] | tuple[str, ...]) -> str:
    """A short hint naming the closest valid option, or '' when none is close (similarity >= 0.6)."""
    close = closest(name, options)
    return f" Did you mean '{close}'?" if close else ""
