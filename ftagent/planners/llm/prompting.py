"""Shared prompt parts: brief sections, time left, data statistics, and fitting to the budget.

Every planner prompt is a list of :class:`~ftagent.llm.budget.Section` objects, each with a
priority; :func:`fit` drops the least useful optional ones when the prompt is over
``FT_PROMPT_TOKEN_BUDGET``. The scenario sections come from the session's brief
(:mod:`ftagent.planners.llm.brief`), so every prompt describes the scenario with the same words.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ftagent.core.durations import format_duration
from ftagent.llm.budget import DEFAULT_BUDGET, Fitted, Section, fit_sections, message_tokens
from ftagent.planners.llm.brief import (
    BUDGETS,
    CONTAMINATION,
    CONTAMINATION_SUMMARY,
    brief_sections,
    scenario_brief,
)

if TYPE_CHECKING:
    from ftagent.core.types import ScenarioInfo


def budget_of(settings: Any) -> int:
    """``FT_PROMPT_TOKEN_BUDGET`` (the default when the settings have none)."""
    return int(getattr(getattr(settings, "ft", None), "prompt_token_budget", DEFAULT_BUDGET) or DEFAULT_BUDGET)


def brief_part(scenario: ScenarioInfo, name: str, priority: int = 50, *, required: bool = False,
               extra: str = "") -> Section:
    """One section of the session's brief as a prompt section (empty body when the brief lacks it)."""
    body = brief_sections(scenario_brief(scenario)).get(name, "")
    if extra:
        body = f"{body}\n{extra}".strip()
    return Section(key=f"brief:{name}", title=name, body=body, priority=priority, required=required, level=2)


def contamination_summary(scenario: ScenarioInfo) -> str:
    """The contamination check in one bullet, for a prompt that plans data but does not write it ('' when
    the brief has no such check)."""
    return CONTAMINATION_SUMMARY if brief_sections(scenario_brief(scenario)).get(CONTAMINATION) else ""


def time_left(ctx: Any, *, finished: bool = False) -> str:
    """``- time left in this session: 3 h 20 min``, where the session is (this loop, what runs beside it, the
    loops left) and the time each loop has (empty without a context)."""
    parts = []
    try:
        left = ctx.time_left()
        timed = left is not None
    except Exception:  # noqa: BLE001 - tools and tests pass no engine context
        left, timed = None, True  # unknown: say nothing about a limit
    if left is not None:
        parts.append(f"- time left in this session: {format_duration(left)}")
    elif not timed:  # a played planner read "leave time for the remaining loops" as a hidden limit (issue 35)
        parts.append("- no session time limit (no --timeout): only the number of loops ends the session")
    try:
        index = ctx.loop.index
        loop_n = (ctx.state.config.get("run") or {}).get("loop_n")
    except Exception:  # noqa: BLE001
        index, loop_n = None, None
    if index is None:
        return "\n".join(parts)
    at_once = trials_in_flight(ctx)
    if at_once is None:
        more = int(loop_n) - index - 1 if loop_n else None
        parts.append(_loop_line(index, more, finished))
        loops = None if more is None else more if finished else more + 1  # the loops still to run
        k = 1
    else:
        k, others = at_once
        started = int(getattr(ctx.state, "loop_index", index + 1) or index + 1)
        parts.extend(_trials_lines(index, k, others, started, int(loop_n) if loop_n else None, finished))
        to_start = max(int(loop_n) - started, 0) if loop_n else None
        loops = None if to_start is None else to_start + len(others) + (0 if finished else 1)
    if left is not None and loops:
        which = "for each of them" if finished else "per loop, this one included"
        rounds = -(-loops // k)  # K at once: the loops still to run take this many turns of the slots
        per = (f"{format_duration(left / rounds)} {which}" + (f" ({k} run at once)" if k > 1 else "")
               + ("" if finished else ","))
        parts.append(f"- so about {per} for data processing, training and evaluation together: plan the training "
                     "to fit in that (the per-run limits above are ceilings, not targets)")
    return "\n".join(parts)


def trials_in_flight(ctx: Any) -> tuple[int, list[tuple[int, Any]]] | None:
    """K and the other loops in flight (index, hypothesis or None) when loops run K at once (issue 41's
    :class:`~ftagent.engine.parallel.TrialContext`); None one at a time."""
    try:
        k = int(ctx.trials_at_once())
        others = ctx.peers()
    except Exception:  # noqa: BLE001 - one loop at a time: a plain context has neither
        return None
    if k <= 1:
        return None
    return k, sorted(((int(p.index), getattr(p, "hypothesis", None)) for p in others), key=lambda x: x[0])


def loops_part(ctx: Any, priority: int = 40) -> list[Section]:
    """Where a session with K loops at once is, for a prompt without the budgets (the data script's): this loop,
    what runs beside it, the loops left (relay round r2: a data task said "the same selection as the
    plain-format experiment" and the writer was not told that experiment runs beside it). Empty one at a time."""
    in_flight = trials_in_flight(ctx)
    if in_flight is None:
        return []
    try:
        index = int(ctx.loop.index)
        loop_n = (ctx.state.config.get("run") or {}).get("loop_n")
        started = int(getattr(ctx.state, "loop_index", index + 1) or index + 1)
    except Exception:  # noqa: BLE001 - a context without a loop or state
        return []
    lines = _trials_lines(index, in_flight[0], in_flight[1], started, int(loop_n) if loop_n else None, False)
    return [text_part("loops", "Loops running now", "\n".join(lines), priority, level=2)]


def one_line(text: str, limit: int = 160) -> str:
    """``text`` on one line, cut at a word before ``limit`` characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[:limit].rsplit(" ", 1)[0] + " …"


def _trials_lines(index: int, k: int, others: list[tuple[int, Any]], started: int, loop_n: int | None,
                  finished: bool) -> list[str]:
    """Where a session with K loops at once is (relay round r2: "this is loop 2; 1 more loop(s) after it" beside
    a running loop 1 read as if loops ran one after another): K, this loop, what runs beside it, what is left."""
    this = f"loop {index} has just finished" if finished else f"this is loop {index}"
    lines = [f"- loops run {k} at once (FT_PARALLEL_TRIALS), numbered from 0 in the order they start; {this}"]
    if others:
        lines.append("- running now" + ("" if finished else " beside it") + ": " + "; ".join(
            f"loop {i} ({one_line(h.hypothesis)})" if h is not None else f"loop {i} (not proposed yet)"
            for i, h in others) + " — results not in yet")
    else:
        lines.append("- no other loop is running now")
    if loop_n is not None:
        done = started - len(others) - (0 if finished else 1)
        to_start = max(loop_n - started, 0)
        later = (f"{to_start} more will start as slots free up" if to_start else
                 "no more will start: the loops above are the session's last")
        # relay round r2: "this is loop 2; 1 more loop after it" read as if loops ran one after another
        lines.append(f"- loops in this session: {loop_n} (--loop-n counts trials: each loop is one trial, whichever "
                     f"slot it runs on); {started} started, {done} finished"
                     + (" (this one included)" if finished else "") + f"; {later}")
    return lines


def _loop_line(index: int, more: int | None, finished: bool) -> str:
    """Where the session is: this loop (or, for feedback, the loop that has just finished) and what follows."""
    if finished:
        after = ("" if more is None else "; it was the last loop (a next step is kept for a resumed session)"
                 if more <= 0 else f"; {more} more loop(s) follow")
        return f"- loop {index} (numbered from 0) has just finished{after}"
    after = "" if more is None else "; it is the last loop" if more <= 0 else f"; {more} more loop(s) after it"
    return f"- this is loop {index} (numbered from 0){after}"


def budgets_part(scenario: ScenarioInfo, ctx: Any, priority: int = 60, *, finished: bool = False) -> Section:
    """The brief's budgets plus the time left now (``finished``: the loop's experiment is over)."""
    return brief_part(scenario, BUDGETS, priority, extra=time_left(ctx, finished=finished))


def text_part(key: str, title: str, body: str, priority: int = 50, *, required: bool = False,
              level: int = 1) -> Section:
    return Section(key=key, title=title, body=body or "", priority=priority, required=required, level=level)


def fit(sections: list[Section], settings: Any, system: str = "") -> Fitted:
    """The user prompt fitted into the budget (the system message counts too)."""
    extra = message_tokens([{"content": system}]) if system else 0
    return fit_sections(sections, budget_of(settings), extra_tokens=extra + 4)


DEBUG_WRITER = ("the data script's debug run (`--debug`: about 100 samples in any LLM stage; a script without an "
                "LLM stage does the same work in both modes, so the full run writes these rows again)")
STEPS_RULE = ("steps per epoch = ceil(rows × (1 − val_size) ÷ (per_device_train_batch_size × "
              "gradient_accumulation_steps{gpus})); total steps = that × num_train_epochs, unless max_steps is set")


# TRL's GRPOTrainer repeats each prompt num_generations times and per_device_train_batch_size counts completions:
# relay round r3's GRPO run, 84 rows × 4 generations ÷ batch 8, ran 42 steps (the SFT rule said 11)
GRPO_STEPS_RULE = ("steps per epoch = ceil(rows × num_generations ÷ (per_device_train_batch_size × "
                   "gradient_accumulation_steps{gpus})): each prompt is answered num_generations times and the "
                   "batch counts completions (it must be a multiple of num_generations); total steps = that × "
                   "num_train_epochs, unless max_steps is set")


def steps_rule(gpus: int, *, generations: bool = False) -> str:
    """How the trainer turns rows into optimizer steps (transformers' Trainer: one step per effective batch;
    ``generations``: TRL's GRPOTrainer, one step per batch of completions)."""
    return (GRPO_STEPS_RULE if generations else STEPS_RULE).format(gpus=f" × {gpus} GPUs" if gpus > 1 else "")


def debug_data_stats(workspace: Path, model_path: str | None, limit_rows: int = 5000,
                     written_by: str = DEBUG_WRITER) -> str:
    """Rows, token lengths (base model's tokenizer) and one row of the workspace's ``data.json``.

    Written after the data script's debug run, so in a first round there is nothing to show.
    """
    path = Path(workspace) / "data.json"
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    if not isinstance(rows, list) or not rows:
        return ""
    from ftagent.datasets.catalogue import _percentile
    from ftagent.datasets.tokens import load_token_counter

    counter = load_token_counter(Path(model_path) if model_path else None)
    # the user turn as LLaMA-Factory builds it (llamafactory/data/converter.py, AlpacaDatasetConverter.__call__:
    # the non-empty instruction and input joined by "\n"), then the answer turn; the template's tokens come on
    # top. A join with spaces counted 2 tokens more than the data script's own count of each turn (relay r1)
    lengths = sorted(counter.count("\n".join(str(r[k]) for k in ("instruction", "input") if r.get(k)))
                     + counter.count(str(r.get("output") or ""))
                     for r in rows[:limit_rows] if isinstance(r, dict))
    out = sorted(counter.count(str(r.get("output") or "")) for r in rows[:limit_rows] if isinstance(r, dict))
    if not lengths:
        return ""
    sample = json.dumps(rows[0], ensure_ascii=False)
    sample = sample if len(sample) <= 600 else sample[:600] + "…"
    from ftagent.planners.llm.chat_overhead import template_overhead

    overhead = template_overhead(model_path)
    templated = (f"- longest sample with the chat template: {lengths[-1] + overhead.tokens} tokens "
                 f"({lengths[-1]} + {overhead.tokens} template tokens)\n" if overhead else "")
    return (f"- {len(rows):,} rows written by {written_by}\n"
            f"- tokens per row (instruction and input joined by a newline, LLaMA-Factory's user turn, plus the "
            f"output; base model tokenizer): p50 {_percentile(lengths, 50)}, "
            f"p90 {_percentile(lengths, 90)}, p99 {_percentile(lengths, 99)}, max {lengths[-1]}\n"
            f"- tokens per output: p50 {_percentile(out, 50)}, max {out[-1]}\n{templated}"
            f"- first row: {sample}")
