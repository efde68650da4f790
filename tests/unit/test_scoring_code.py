"""Code extraction (``oc_ext.extract_code``): stock ``humaneval_postprocess_v2``'s fence rule, any tag.

The real extractor runs against stock's in ``tests/parity/test_core_code.py``; here, against a minimal
OpenCompass stand-in (the project venv has none)."""

from __future__ import annotations

import pytest

from tests.unit.test_oc_ext_metrics import oc_ext  # noqa: F401 (fixture)

CODE = "def f(x):\n    return x + 1\n"


@pytest.mark.parametrize("reply", [
    f"```python\n{CODE}```", f"```Python\n{CODE}```", f"```python3\n{CODE}```", f"```py\n{CODE}```",
    f"```PYTHON\n{CODE}```", f"```\n{CODE}```", f"Here it is:\n\n```Python\n{CODE}```\nDone.",
    f"```Python\n{CODE}```\n\n```python\nprint(f(1))\n```",
])
def test_fence_with_any_tag_gives_the_first_block(oc_ext, reply):  # noqa: F811
    assert oc_ext.extract_code(reply) == CODE


@pytest.mark.parametrize("reply,code", [
    (f"```python\n{CODE}", CODE),  # cut at the answer-token cap before the closing fence
    (f"[BEGIN]\n '{CODE}' \n[DONE]", CODE),  # stock MBPP's few-shot answer format
    (CODE, CODE), ("\n\n" + CODE, CODE), ("", ""), (None, ""),
    ("    return x + 1\n", "    return x + 1\n"),  # a body-only completion keeps its indentation
    ("```python\n\n    return x + 1\n```", "    return x + 1\n"),
])
def test_unclosed_fence_raw_and_empty(oc_ext, reply, code):  # noqa: F811
    assert oc_ext.extract_code(reply) == code
