"""math-verify scoring that a loaded machine cannot change, imported by rendered configs in the tool env.

Standalone on purpose (OpenCompass, math-verify and the standard library only), as ``oc_ext``.

:class:`MathVerifyEvaluator` scores exactly as stock ``MATHVerifyEvaluator`` (opencompass 0.5.4,
``opencompass/evaluator/math_evaluator.py``: the same ``parse``/``verify`` calls and configs, one
subprocess per answer) with three differences, all about what stock does when time runs out or the
gold cannot be read:

* math-verify's own limits (``parse(parsing_timeout=5)``, ``verify(timeout_seconds=5)``: a signal
  alarm, after which the answer is silently ``[]``/False) and stock's 10 s subprocess limit can expire
  on a loaded machine and turn a correct answer wrong. An answer scored wrong after a timeout is
  verified again with wider limits (:data:`ATTEMPTS`); only one still timed out after the last
  attempt is scored wrong, as stock scores it, and marked ``verify_timed_out`` in its details.
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
from typing import Any

from opencompass.openicl.icl_evaluator import BaseEvaluator
from opencompass.registry import ICL_EVALUATORS

#: ``(math-verify's own limit in s, the subprocess's limit in s)`` per attempt: stock's first
#: (math-verify's default 5 s, stock's ``_verify_with_timeout(timeout=10)``), then a wider one.
ATTEMPTS: tuple[tuple[int, float], ...] = ((5, 10.0), (60, 150.0))
_LOGGERS = ("math_verify.parser", "math_verify.grader")  # where math-verify reports a timeout it caught


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


def verify_in_process(pred: str, ref: str, seconds: int, limit: float) -> dict:
    """:func:`verify_once` in a subprocess killed after ``limit`` s (stock ``_verify_with_timeout``)."""
    queue: multiprocessing.Queue[dict[str, Any]] = multiprocessing.Queue()
    proc = multiprocessing.Process(target=_worker, args=(pred, ref, seconds, queue))
    proc.start()
    proc.join(limit)
    if proc.is_alive():
        proc.terminate()
        proc.join()
        return {"status": "timeout"}
    if queue.empty():
        return {"status": "error", "msg": ""}
    return queue.get_nowait()


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
