"""Reading an LLM's reply: a leading ``<think>`` block dropped, JSON found in it, a fenced code block taken
out and checked to parse, an unclosed fence noticed (the reply was cut off). Pure functions, no I/O."""

from __future__ import annotations

import ast
import json
import re
from typing import Any

_FENCE_RE = re.compile(r"```[ \t]*([\w+.-]*)[^\n]*\n(.*?)```", re.DOTALL)
_THINK_RE = re.compile(r"^\s*<think>.*?</think>\s*", re.DOTALL)
_LANG_ALIASES = {"python": {"python", "py", "python3"}, "yaml": {"yaml", "yml"}, "json": {"json"}}


def strip_think(text: str) -> str:
    """Drop a leading ``<think>...</think>`` block (reasoning models)."""
    return _THINK_RE.sub("", text, count=1)


def parse_json_reply(text: str) -> Any:
    """Parse JSON from an LLM reply: plain JSON, a fenced block, the outermost ``{...}``, or a
    Python-literal-ish dict (single quotes, True/False/None, trailing commas).

    Raises:
        ValueError: when nothing parses.
    """
    text = strip_think(text).strip()
    candidates = [text] + [body for _, body in _FENCE_RE.findall(text)]
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start:end + 1])
    for cand in candidates:
        try:
            return json.loads(cand)
        except ValueError:
            pass
    for cand in candidates:
        pythonic = re.sub(r"\btrue\b", "True", re.sub(r"\bfalse\b", "False", re.sub(r"\bnull\b", "None", cand)))
        for attempt in (cand, pythonic):
            try:
                value = ast.literal_eval(attempt)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                continue
            if isinstance(value, (dict, list)):
                return value
    raise ValueError("the reply holds no parseable JSON object")


def extract_code(text: str, language: str) -> str | None:
    """The longest fenced block tagged with ``language`` (or an alias); else the longest untagged one."""
    aliases = _LANG_ALIASES.get(language, {language})
    blocks = _FENCE_RE.findall(strip_think(text))
    tagged = [body for tag, body in blocks if tag.lower() in aliases]
    untagged = [body for tag, body in blocks if not tag]
    pool = tagged or untagged
    return max(pool, key=len).strip("\n") + "\n" if pool else None


def check_code(code: str, language: str) -> str | None:
    """A short error text when ``code`` does not parse as ``language``; None when it does."""
    if language == "python":
        try:
            compile(code, "<reply>", "exec")
        except SyntaxError as exc:
            return f"the Python code does not compile: {exc.msg} (line {exc.lineno})"
    elif language == "yaml":
        import yaml

        try:
            data = yaml.safe_load(code)
        except yaml.YAMLError as exc:
            return f"the YAML does not parse: {exc}"
        if not isinstance(data, dict):
            return "the YAML must be a mapping of keys to values"
    return None


def is_fenced_open(text: str) -> bool:
    """True when ``text`` opened a code fence it did not close (a reply cut off inside its code)."""
    return text.count("```") % 2 == 1
