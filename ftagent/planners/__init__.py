"""Planners: who decides what a loop tries. ``llm`` (an LLM through LiteLLM: propose, code, feedback,
prompts) and ``heuristic`` (the offline policy). They satisfy ftagent.finetune.protocols by shape and
import only the layers below (runners, benchmarks, datasets, models, engine, core) — never ``tools``.
"""
