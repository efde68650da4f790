"""The LLM plumbing every layer above may use: the LiteLLM client, the session's loopback gateway (data
scripts and the OpenCompass judge), per-call records and the offline token count / prompt budget.

It serves the planner, the judge, the data scripts, the forecast and dataset selection alike (also with the
heuristic planner), so it sits below ``planners`` and ``tools``; prompts and planning stay in
:mod:`ftagent.planners.llm`. Kept light on purpose: nothing here imports litellm at import time
(:mod:`ftagent.llm.client` imports it lazily on the first call).
"""
