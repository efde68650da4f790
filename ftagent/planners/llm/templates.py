"""Prompt templates: short Jinja2 files in ``ftagent/planners/llm/prompts/`` rendered with StrictUndefined.

A missing variable is an error at render time (never a silently empty prompt section).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

PROMPTS_DIR = Path(__file__).parent / "prompts"
#: How many loss points a run should log: one owner for the config prompt (which sets logging_steps) and the
#: proposal prompt (which names the recipe): a played planner met the rule only in the config prompt, where it
#: overrode the logging_steps its own task had named (issue 35).
LOGGING_POINTS = (20, 50)
LOGGING_RULE = (f"logging_steps: set so the run logs roughly {LOGGING_POINTS[0]}-{LOGGING_POINTS[1]} loss points "
                "(total steps ÷ logging_steps); this rule wins over any other logging_steps, since logging does "
                "not change the model")


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(PROMPTS_DIR)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
        autoescape=False,
    )
    env.filters["tojson_pretty"] = lambda v: __import__("json").dumps(v, indent=1, ensure_ascii=False, default=str)
    env.filters["clip"] = clip
    env.globals["logging_rule"] = LOGGING_RULE
    return env


def clip(text: Any, limit: int = 3000) -> str:
    """``text`` cut to ``limit`` characters, keeping the head and the tail."""
    text = "" if text is None else str(text)
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n... [{len(text) - limit} characters cut] ...\n{text[-half:]}"


def render(name: str, **context: Any) -> str:
    """Render ``prompts/<name>`` (``.j2`` added when missing) with ``context``.

    Raises:
        jinja2.UndefinedError: a variable the template uses was not given.
    """
    if not name.endswith(".j2"):
        name += ".j2"
    return _env().get_template(name).render(**context).strip() + "\n"
