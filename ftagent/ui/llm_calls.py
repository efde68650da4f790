"""The "LLM calls" view of a loop: every request the planner sent and the reply it got.

Each ``llm_call`` event names its record (``LOG_PATH/<session>/llm/<n>.json``, already redacted when
written); :func:`call_views` joins the two into :class:`LLMCallView` rows (pure, tested without
Streamlit), :func:`show_llm_calls` draws them: a summary table (stage, model, tokens, cost, latency),
then one expander per call with each message and the reply.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ftagent.views.console import short_duration

MAX_CHARS = 60_000  # per message shown (the record on disk keeps everything)


class LLMCallView(BaseModel):
    """One call as the UI shows it."""

    n: int | None = None
    stage: str = ""
    model: str = ""
    prompt_tokens: int | None = None
    prompt_tokens_measured: int | None = None
    prompt_budget: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = None
    latency_s: float | None = None
    error: str | None = None
    messages: list[dict[str, Any]] = Field(default_factory=list)
    reply: str = ""
    record: str | None = None
    missing_record: bool = False

    def title(self) -> str:
        tokens = f"{self.prompt_tokens or 0:,} + {self.completion_tokens or 0:,} tokens"
        cost = f"${self.cost_usd:.4f}" if self.cost_usd is not None else "cost unknown"
        latency = short_duration(self.latency_s)
        head = f"#{self.n} " if self.n is not None else ""
        return f"{head}{self.stage} · {self.model} · {tokens} · {cost} · {latency}" + (" · ERROR" if self.error else "")


def _record(path: str | None, session_dir: Path | None) -> dict[str, Any] | None:
    candidates = []
    if path:
        candidates.append(Path(path))
        if session_dir is not None:
            candidates.append(Path(session_dir) / "llm" / Path(path).name)  # a moved or copied log folder
    for candidate in candidates:
        try:
            data = json.loads(candidate.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            return data
    return None


def call_views(calls: list[dict[str, Any]], session_dir: Path | None = None) -> list[LLMCallView]:
    """The ``llm_call`` events joined with their records (events alone when a record is missing)."""
    out = []
    for event in calls:
        rec = _record(event.get("record"), session_dir)
        merged = {**event, **(rec or {})}
        out.append(LLMCallView(
            n=merged.get("n"), stage=str(merged.get("stage") or ""), model=str(merged.get("model") or ""),
            prompt_tokens=merged.get("prompt_tokens"), prompt_tokens_measured=merged.get("prompt_tokens_measured"),
            prompt_budget=merged.get("prompt_budget"), completion_tokens=merged.get("completion_tokens"),
            cost_usd=merged.get("cost_usd"), latency_s=merged.get("latency_s"), error=merged.get("error"),
            messages=list(merged.get("messages") or []), reply=str(merged.get("reply") or ""),
            record=event.get("record"), missing_record=rec is None))
    return out


def summary_rows(views: list[LLMCallView]) -> list[dict[str, Any]]:
    """One row per call for the summary table."""
    return [{"#": v.n, "stage": v.stage, "model": v.model, "prompt tokens": v.prompt_tokens,
             "measured": v.prompt_tokens_measured, "budget": v.prompt_budget,
             "completion tokens": v.completion_tokens, "cost (USD)": v.cost_usd, "latency": short_duration(v.latency_s),
             "error": v.error or ""} for v in views]


def _clip(text: str) -> str:
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS] + f"\n… ({len(text) - MAX_CHARS} more characters in the record)"


def show_llm_calls(calls: list[dict[str, Any]], session_dir: Path | None = None) -> None:
    """Draw the loop's LLM calls (Streamlit)."""
    import pandas as pd
    import streamlit as st

    views = call_views(calls, session_dir)
    if not views:
        return
    st.markdown(f"**LLM calls** ({len(views)})")
    st.dataframe(pd.DataFrame(summary_rows(views)), width="stretch", hide_index=True)
    for view in views:
        with st.expander(view.title(), expanded=False):
            if view.missing_record:
                st.caption(f"record not found: {view.record}")
            if view.prompt_tokens_measured:
                st.caption(f"prompt measured at {view.prompt_tokens_measured:,} tokens"
                           + (f" of a {view.prompt_budget:,}-token budget" if view.prompt_budget else ""))
            for message in view.messages:
                st.markdown(f"**{message.get('role', '?')}**")
                st.code(_clip(str(message.get("content") or "")), language="markdown", wrap_lines=True)
            if view.error:
                st.error(view.error)
            st.markdown("**reply**")
            st.code(_clip(view.reply), language="markdown", wrap_lines=True)
