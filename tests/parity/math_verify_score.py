"""Tool-env script: ftagent's math-verify evaluator (the one ``math``'s YAML resolves to) on planted
cases: a gold that does not parse between two items, verifications that time out (issue 31 item 7), a
verification the machine stalls without it computing and one that computes past its limit (issue 43).

Payload (JSON on stdin): ``{"evaluator": "module:Name", "stock": "module:Name"}``. Prints one JSON line.
"""

from __future__ import annotations

import importlib
import json
import sys
import time


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


def _planted(module, name: str, seconds: float, *, busy: bool):
    """Replace ``module.name`` by the same call after ``seconds`` of sleeping (a machine too loaded to give the
    process the CPU) or of computing (``busy``: a verification that is slow itself); returns the restorer.
    Planted in this process before the evaluator forks its children, which inherit it."""
    real = getattr(module, name)

    def slow(*args, **kwargs):
        if busy:
            end = time.process_time() + seconds
            while time.process_time() < end:
                pass
        else:
            time.sleep(seconds)
        return real(*args, **kwargs)

    setattr(module, name, slow)
    return lambda: setattr(module, name, real)


def _timeouts(ours, oc_math) -> dict:
    import math_verify.grader as grader

    right_wrong = (["So the answer is $\\boxed{33}$.", "So the answer is $\\boxed{34}$."], ["33", "33"])
    out = {}
    for key, seconds, busy, attempts in (("stalled", 6, False, None), ("computing", 2, True, [[1, 20], [5, 60]]),
                                         ("unresolved", 2, True, [[1, 20], [1, 20]])):
        restore = _planted(grader, "sympy_expr_eq", seconds, busy=busy)
        try:
            started = time.monotonic()
            out[key] = ours(attempts=attempts).score(*right_wrong)
            out[key]["wall_s"] = time.monotonic() - started
        finally:
            restore()
    restore = _planted(oc_math, "verify_once", 3600, busy=True)  # past math-verify's own limits: the process's
    try:
        started = time.monotonic()
        out["killed"] = ours(attempts=[[5, 1.0], [5, 1.0]]).score(right_wrong[0][:1], right_wrong[1][:1])
        out["killed"]["wall_s"] = time.monotonic() - started
    finally:
        restore()
    return out


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
    out.update(_timeouts(ours, oc_math))
    out["caught"] = _caught_timeout(oc_math)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
