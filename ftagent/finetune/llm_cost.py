"""The planner's LLM use in the forecast: calls, tokens and wall time per session, and the price where LiteLLM
knows it (0 for a planner that asks no LLM)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ftagent.core.forecast_arithmetic import LLMForecast
from ftagent.finetune.probe_cache import load_cache, store

if TYPE_CHECKING:
    from ftagent.core.settings import Settings
    from ftagent.core.types import ScenarioInfo

COMPLETION_TOKENS = 1500  # assumed reply size of one planner call (replies are not known before)
LLM_CALL_S = 60.0  # assumed wall time of one planner call when none was measured (a long reply at ~30 tokens/s)
LLM_PROMPTS = {"propose": ["proposal_system.j2", "proposal_user.j2"], "code": ["data_coder.j2", "config_coder.j2"],
               "feedback": ["feedback_success.j2"]}  # one call per template pair/entry: 4 calls a loop


def llm_latency(settings: Settings, model: str | None, events: list[Any] | None = None) -> tuple[float, str]:
    """(seconds per planner call, where it comes from): the mean latency of this session's LLM calls so
    far (the dataset selection; cached for the next forecast), else the cached mean of an earlier one,
    else ``LLM_CALL_S``."""
    calls = [float(e.get("latency_s") or 0.0) for e in events or []
             if e.get("type") == "llm_call" and not e.get("error") and e.get("latency_s")]
    key = f"llm_latency:{model}"
    if calls:
        mean = sum(calls) / len(calls)
        store(settings.ft.file_path, key, {"s_per_call": mean, "calls": len(calls), "measured_at": time.time()})
        return mean, f"measured: the mean of this session's {len(calls)} LLM call(s) so far"
    cached = load_cache(settings.ft.file_path).get(key)
    if cached and cached.get("s_per_call"):
        return float(cached["s_per_call"]), f"measured in an earlier session ({cached.get('calls', '?')} call(s))"
    return LLM_CALL_S, "assumed (no call measured yet)"


def llm_forecast(settings: Settings, scenario: ScenarioInfo, planner: str, loop_n: int,
                 events: list[Any] | None = None) -> LLMForecast:
    """Calls, tokens and wall time of the planner (0 for the heuristic one); the price where LiteLLM knows it.

    Prompt tokens per call: the template's text plus the scenario brief every prompt quotes (plus the
    parameter catalogue for the config coder); completion tokens: ``COMPLETION_TOKENS`` per call; seconds
    per call: :func:`llm_latency`.
    """
    from ftagent.planners.registry import planner_spec

    if not planner_spec(planner).asks_llm:  # a declared capability, not the name
        return LLMForecast(model=None, calls=0, prompt_tokens=0, completion_tokens=0, cost_usd=0.0)
    from ftagent.llm.budget import count_tokens
    from ftagent.planners.llm.templates import PROMPTS_DIR

    model = settings.llm.chat_model
    brief = count_tokens(scenario.description_text or "")
    catalogue = count_tokens(scenario.parameter_catalogue or "")
    per_loop = calls = 0
    for names in LLM_PROMPTS.values():
        for name in names:
            path = PROMPTS_DIR / name
            text = path.read_text(encoding="utf-8") if path.is_file() else ""
            per_loop += count_tokens(text) + (catalogue if name == "config_coder.j2" else 0)
        calls += 1 if names[0].startswith("proposal") else len(names)
    per_loop += brief * calls
    prompt, completion = per_loop * loop_n, COMPLETION_TOKENS * calls * loop_n
    s_per_call, source = llm_latency(settings, model, events)
    return LLMForecast(model=model, calls=calls * loop_n, prompt_tokens=prompt, completion_tokens=completion,
                       cost_usd=_price(model, prompt, completion), s_per_call=round(s_per_call, 2), s_source=source)


def _price(model: str | None, prompt: int, completion: int) -> float | None:
    """USD from LiteLLM's price table; None when the model is not in it (unknown, never $0)."""
    if not model:
        return None
    try:
        import litellm

        info = litellm.model_cost.get(model) or litellm.model_cost.get(model.split("/", 1)[-1])
    except Exception:  # noqa: BLE001 - a missing price is "unknown", not an error
        return None
    if not info or info.get("input_cost_per_token") is None:
        return None
    return round(prompt * float(info["input_cost_per_token"])
                 + completion * float(info.get("output_cost_per_token") or 0.0), 4)
