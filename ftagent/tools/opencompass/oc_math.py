"""math-verify scoring that a loaded machine cannot change, imported by rendered configs in the tool env.

Standalone on purpose (OpenCompass, math-verify and the standard library only), as ``oc_ext``.

:class:`MathVerifyEvaluator` scores exactly as stock ``MATHVerifyEvaluator`` (opencompass 0.5.4,
``opencompass/evaluator/math_evaluator.py``: the same ``parse``/``verify`` calls and configs, one
subprocess per answer) with these differences, all about what stock does when time runs out or the
gold cannot be read:

* stock's limits are wall-clock: math-verify's own (``parse(parsing_timeout=5)``, ``verify(timeout_seconds=5)``:
  a ``signal.alarm``, after which the answer is silently ``[]``/False) and its 10 s subprocess limit. A
  loaded machine let them expire and turned answers wrong. Here both count the **CPU time** the
  verification used (:func:`cpu_timeout`, ``ITIMER_PROF``; the process limit reads the child's CPU time,
  with a wall-clock cap of :data:`WALL_CAP` times the limit for a child that hangs without computing), so
  on an idle machine the verdicts are stock's and on a loaded one they stay the same.
* every child is forked from a warmed-up evaluator (:func:`warm_up`: math-verify imported, one parse and
  one symbolic comparison run once in the parent). Issue 43: under load every wrong AIME answer (30/30)
  hit math-verify's 5 s and was retried, no gold answer did. Why: each answer is verified in a fresh
  child, and a wrong answer's first symbolic comparison loads sympy's machinery there (0.7-3.3 s per
  child at load 13 where a right integer answer, which the first comparison decides, took 0.7 s; 0.2-0.5 s
  from a warmed parent), so the load, not the answer, ran out the wall clock.
* an answer scored wrong after a timeout is verified again with wider limits (:data:`ATTEMPTS`); only
  one still timed out after the last attempt is scored wrong, as stock scores it, and marked
  ``verify_timed_out`` in its details.
* every answer keeps its details entry: stock drops the entry of an item whose gold does not parse
  (math_evaluator.py:115, ``continue`` after ``count += 1``), and OpenCompass's
  ``BaseEvaluator.group`` pairs details with the dataset rows by position
  (openicl/icl_evaluator/icl_base_evaluator.py:63), so every later item got its neighbour's verdict.
  Here the entry is kept (``correct: False``, ``skipped: "gold not parsable"``; the accuracy is
  stock's: that item counts as wrong there too).
* the result counts the timeouts: ``verify_timeouts`` (answers whose first verification timed out)
  and ``verify_unresolved`` (still timed out after the last attempt), present only when not 0, so a
  run without timeouts reports what stock reports. ftagent warns when ``verify_unresolved`` > 0.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from opencompass.openicl.icl_evaluator import BaseEvaluator
from opencompass.registry import ICL_EVALUATORS

#: ``(math-verify's own limit, the subprocess's limit)`` per attempt, in CPU seconds: stock's first
#: (math-verify's default 5 s, stock's ``_verify_with_timeout(timeout=10)``), then a wider one.
ATTEMPTS: tuple[tuple[int, float], ...] = ((5, 10.0), (60, 150.0))
#: a child that used less CPU than its limit is still killed after this many times the limit in wall-clock
#: seconds (it hangs without computing, or the machine is loaded past any use)
WALL_CAP = 10.0
_LOGGERS = ("math_verify.parser", "math_verify.grader")  # where math-verify reports a timeout it caught
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_timeout(timeout_seconds: int | None = 10) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``math_verify.utils.timeout`` counting this process's CPU time (``ITIMER_PROF``) instead of the wall
    clock (its ``signal.alarm``): the same ``TimeoutException`` after ``timeout_seconds`` of computing,
    which a busy machine cannot bring forward. ``None``/0: no limit (as math-verify's)."""

    def decorator(func: Callable[..., Any]) -> Callable[..., Any]:
        if not timeout_seconds or timeout_seconds <= 0:
            return func

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            from math_verify.errors import TimeoutException

            def handler(signum: int, frame: Any) -> None:
                raise TimeoutException("Operation timed out!")

            old = signal.signal(signal.SIGPROF, handler)
            signal.setitimer(signal.ITIMER_PROF, float(timeout_seconds))
            try:
                return func(*args, **kwargs)
            finally:
                signal.setitimer(signal.ITIMER_PROF, 0)
                signal.signal(signal.SIGPROF, old)

        return wrapper

    return decorator


def _use_cpu_time() -> None:
    """math-verify's parse and verify look ``timeout`` up in their modules at each call: point it at
    :func:`cpu_timeout` (this process only: the parent's warm-up and each verification child)."""
    import math_verify.grader as grader
    import math_verify.parser as parser

    parser.timeout = grader.timeout = cpu_timeout


class _TimeoutCount(logging.Handler):
    """Counts math-verify's "Timeout during parsing/comparison" warnings (it returns ``[]``/False then)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith("Timeout during"):
            self.count += 1


def verify_once(pred: str, ref: str, seconds: int) -> dict:
    """Stock's ``_verify_worker`` (math_evaluator.py:9-52) with math-verify's limits set to
    ``seconds`` and its caught timeouts counted; ``{"status": ok|empty|error, ...}``."""
    from latex2sympy2_extended import NormalizationConfig
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    _use_cpu_time()
    counter = _TimeoutCount()
    for name in _LOGGERS:
        logger = logging.getLogger(name)
        logger.addHandler(counter)
        if logger.getEffectiveLevel() > logging.WARNING:
            logger.setLevel(logging.WARNING)
    try:
        gold_parsed = parse(f"${ref}$", extraction_mode="first_match",
                            extraction_config=[LatexExtractionConfig(), ExprExtractionConfig()],
                            parsing_timeout=seconds)
        if len(gold_parsed) == 0:
            return {"status": "empty", "timeouts": counter.count}
        answer_parsed = parse(
            pred,
            extraction_config=[LatexExtractionConfig(
                normalization_config=NormalizationConfig(nits=False, malformed_operators=False, basic_latex=True,
                                                         equations=True, boxed="all", units=True),
                boxed_match_priority=0, try_extract_without_anchor=False)],
            extraction_mode="first_match", parsing_timeout=seconds)
        correct = float(verify(answer_parsed, gold_parsed, timeout_seconds=seconds))
        return {"status": "ok", "correct": correct, "answer_parsed": str(answer_parsed),
                "gold_parsed": str(gold_parsed), "timeouts": counter.count}
    except Exception as exc:  # stock: ('error', str(e))
        return {"status": "error", "msg": str(exc), "timeouts": counter.count}
    finally:
        for name in _LOGGERS:
            logging.getLogger(name).removeHandler(counter)


def _worker(pred: str, ref: str, seconds: int, queue) -> None:
    queue.put(verify_once(pred, ref, seconds))


def cpu_seconds(pid: int) -> float | None:
    """The CPU time (user + system) process ``pid`` has used, from ``/proc`` (None where unreadable)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime (proc(5): fields 14, 15)
    except (OSError, IndexError, ValueError):
        return None


def _wait(proc: multiprocessing.Process, limit: float, poll: float = 0.1) -> bool:
    """Wait for ``proc`` until it used ``limit`` CPU seconds (the wall clock where /proc cannot say),
    or for :data:`WALL_CAP` × ``limit`` wall-clock seconds; True when it finished."""
    start = time.monotonic()
    while proc.is_alive():
        used = cpu_seconds(proc.pid or 0)
        waited = time.monotonic() - start
        if (used if used is not None else waited) >= limit or waited >= WALL_CAP * limit:
            return False
        proc.join(poll)
    return True


def verify_in_process(pred: str, ref: str, seconds: int, limit: float) -> dict:
    """:func:`verify_once` in a subprocess killed after ``limit`` CPU seconds (stock ``_verify_with_timeout``
    counts wall-clock seconds; see the module docstring)."""
    queue: multiprocessing.Queue[dict[str, Any]] = multiprocessing.Queue()
    proc = multiprocessing.Process(target=_worker, args=(pred, ref, seconds, queue))
    proc.start()
    if not _wait(proc, limit):
        proc.terminate()
        proc.join()
        return {"status": "timeout"}
    if queue.empty():
        return {"status": "error", "msg": ""}
    return queue.get_nowait()


_warm: list[bool] = []


def warm_up() -> None:
    """Import math-verify and run one parse and one symbolic comparison here, once per process, so that every
    verification child forked from it starts warm (see the module docstring). Main thread only (math-verify's
    limits are signals); a failure only leaves the children cold."""
    if _warm or threading.current_thread() is not threading.main_thread():
        return
    _warm.append(True)
    try:
        verify_once("So the answer is $\\boxed{\\frac{\\sqrt{3}}{2} x + \\pi}$.", "7", ATTEMPTS[-1][0])
        verify_once("So the answer is $\\boxed{7}$.", "7", ATTEMPTS[-1][0])
    except Exception:  # noqa: BLE001 - a cold child is slower, never wrong
        pass


def _timed_out(result: dict) -> bool:
    """A verdict that time, not the answer, decided: the process was killed, or math-verify caught a
    timeout and the answer was not found correct anyway."""
    if result["status"] == "timeout":
        return True
    return bool(result.get("timeouts")) and not result.get("correct")


@ICL_EVALUATORS.register_module()
class MathVerifyEvaluator(BaseEvaluator):
    """Stock ``MATHVerifyEvaluator``'s verdicts, robust to timeouts, one details entry per answer
    (see the module docstring). ``attempts``: ``[[math-verify s, process s], ...]`` (default :data:`ATTEMPTS`)."""

    def __init__(self, attempts: list[list[float]] | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.attempts = [(max(1, int(s)), float(limit)) for s, limit in (attempts or ATTEMPTS)]

    def verify(self, pred: str, ref: str) -> tuple[dict, int]:
        """The first verdict time did not decide (else the last attempt's), and how many attempts timed out."""
        timeouts = 0
        for seconds, limit in self.attempts:
            result = verify_in_process(pred, ref, seconds, limit)
            if not _timed_out(result):
                return result, timeouts
            timeouts += 1
        return result, timeouts

    def score(self, predictions, references, test_set=None):
        if len(predictions) != len(references):
            return {"error": "predictions and references have different length"}
        warm_up()
        correct, details, retried, unresolved = 0.0, [], 0, 0
        for pred, ref in zip(predictions, references, strict=True):
            result, timeouts = self.verify(pred, ref)
            retried += timeouts > 0
            final = timeouts == len(self.attempts)
            unresolved += final
            status = result["status"]
            if status == "ok" and not final:
                correct += result["correct"]
                detail = {"pred": result["answer_parsed"], "answer": result["gold_parsed"],
                          "correct": bool(result["correct"])}
            elif status == "empty":  # stock drops this entry (and counts the item wrong)
                detail = {"pred": pred, "answer": ref, "correct": False, "skipped": "gold not parsable"}
            else:  # stock: the raw prediction on a timeout, the error message on an error
                detail = {"pred": result.get("msg", "") if status == "error" else pred, "answer": ref,
                          "correct": False}
            if timeouts:
                detail["verify_timeouts"] = timeouts
            if final:
                detail["verify_timed_out"] = True
            details.append(detail)
        out = {"accuracy": 100.0 * correct / max(len(predictions), 1), "details": details}
        if retried:
            out["verify_timeouts"] = retried
        if unresolved:
            out["verify_unresolved"] = unresolved
        return out
