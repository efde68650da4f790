"""Tool-env script: ftagent's math-verify evaluator (the one ``math``'s YAML resolves to) on planted
cases: a gold that does not parse between two items, verifications that time out (issue 31 item 7).

Payload (JSON on stdin): ``{"evaluator": "module:Name", "stock": "module:Name"}``. Prints one JSON line.
"""

from __future__ import annotations

import importlib
import json
import sys


def _load(path: str):
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


def _caught_timeout(oc_math) -> dict:
    """math-verify catching its own timeout (its signal alarm) inside ``parse``: the answer becomes
    ``[]`` silently; the evaluator must see that time, not the answer, decided."""
    import math_verify.parser as parser
    from math_verify.errors import TimeoutException

    real = parser.extract_target_from_pred

    def slow(*args, **kwargs):
        raise TimeoutException("planted")

    parser.extract_target_from_pred = slow
    try:
        result = oc_math.verify_once("\\boxed{2}", "2", 5)
    finally:
        parser.extract_target_from_pred = real
    return {"result": result, "timed_out": oc_math._timed_out(result)}


def main() -> None:
    payload = json.loads(sys.stdin.read())
    ours = _load(payload["evaluator"])
    preds = ["So the answer is $\\boxed{2}$.", "The answer is $\\boxed{7}$.", "Thus $\\boxed{5}$."]
    refs = ["2", "\\text{}", "5"]  # the middle gold parses to nothing (stock: 'skipped')
    out = {"pairing": ours().score(preds, refs), "stock_pairing": _load(payload["stock"])().score(preds, refs)}
    try:
        import ftagent.tools.opencompass.oc_math as oc_math
    except ImportError:  # today's main has no such module: the retry checks cannot run
        print(json.dumps(out))
        return
    out["retried"] = ours(attempts=[[5, 0.01], [5, 60]]).score(preds[:1], refs[:1])
    out["unresolved"] = ours(attempts=[[5, 0.01], [5, 0.01]]).score(preds[:1], refs[:1])
    out["caught"] = _caught_timeout(oc_math)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
