"""The LLM planner: propose, code and feedback prompts (``prompts/*.j2``), their sections and history.

The plumbing it calls (client, gateway, records, token budget) lives in :mod:`ftagent.llm`, below this
layer, because the judge, the data scripts and the forecast use it too. Kept light on purpose: nothing
here imports litellm at import time.
"""
