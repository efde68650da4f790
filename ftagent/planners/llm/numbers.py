"""Numbers and scores in the planner's words: sizes (``494M``, ``2.3 MB``) and a metric's values and scale
(``62.0 %`` for a percentage, ``0.713`` otherwise). Pure functions, tested directly."""

from __future__ import annotations

import re


def format_count(n: int | float | None) -> str:
    """``494,032,768`` → ``494M``; ``7_615_616_512`` → ``7.6B``; ``125_184`` → ``125K``."""
    if n is None:
        return "unknown"
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            value = n / size
            return f"{value:.1f}{unit}" if value < 10 else f"{value:.0f}{unit}"
    return f"{int(n)}"


def format_bytes(n: float | None) -> str:
    """Bytes in a readable unit (``1.5 GB``, ``3.2 MB``, ``512 B``; decimal units)."""
    if n is None:
        return "unknown"
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def format_gb(gb: float) -> str:
    """A size given in GB, in a unit that does not round small values to zero."""
    return format_bytes(gb * 1e9) if gb > 0 else "0"


# metrics that are not percentages (every OpenCompass rate and the domain metrics are 0-100)
_NOT_PERCENT = re.compile(r"(loss|tau|brier|perplexity|ppl|bleu_raw|rmse|mae|corr)", re.IGNORECASE)


def is_percent(metric: str) -> bool:
    """True when ``metric`` is reported as a percentage (0-100): OpenCompass rates and F-scores."""
    return not _NOT_PERCENT.search(metric or "")


def metric_scale(metric: str) -> str:
    """``a percentage, 0-100`` for rates; else the scale as the evaluator reports it."""
    scale = "a percentage, 0–100" if is_percent(metric) else "on the evaluator's own scale"
    if metric == "mean_core":
        scale += ", the plain mean of the sub-tasks' core metrics"
    return scale


def format_score(value: float | None, metric: str) -> str:
    """``62.0 %`` for a percentage metric, ``0.713`` otherwise; ``not yet measured`` for None."""
    if value is None:
        return "not yet measured"
    if not is_percent(metric):
        return f"{value:.4g}"
    return f"{value:.1f} %" if abs(value * 10 - round(value * 10)) < 1e-9 else f"{value:.2f} %"


def metric_maximum(metric: str, direction: str) -> float | None:
    """The best value the metric can reach (100 for a percentage to maximise), else None."""
    return 100.0 if direction == "max" and is_percent(metric) else None


def scores_maximum(score: float | None, metric: str, direction: str) -> bool:
    """``score`` is the metric's maximum (no later score can beat it); False without a known maximum."""
    top = metric_maximum(metric, direction)
    return top is not None and score is not None and score >= top - 1e-9
