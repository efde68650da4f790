"""The planner's LLM: client (LiteLLM), call records, prompt templates.

Kept light on purpose: nothing here imports litellm. Import :mod:`ftagent.planners.llm.client` where an LLM
call is actually made (litellm is imported lazily inside the client on first use).
"""
