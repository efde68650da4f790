"""When an LLM request is sent again, and when it is not: the one retry layer of :mod:`ftagent.llm.client`.

tenacity retries 408/409/425/429/5xx, timeouts and connection errors with exponential backoff (``max_retry``
retries after the first attempt, ``wait_s`` as the base wait); a server's ``Retry-After`` (seconds or an
HTTP date; ``retry-after-ms`` too) sets the wait before the next attempt, up to ``RETRY_AFTER_MAX_S``.
The session's ``--timeout`` is a hard bound: each attempt's timeout is capped by the time left, an attempt
with less than ``MIN_CALL_S`` left is not sent, and a retry whose wait would end past the deadline is not
made (:class:`DeadlineReached`, a TIMEOUT :class:`StepError`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from ftagent.core.errors import ErrorType, StepError

if TYPE_CHECKING:
    from tenacity import RetryCallState

R = TypeVar("R")

MIN_CALL_S = 5.0  # a request with less time left than this before the session deadline is not sent
RETRY_AFTER_MAX_S = 300.0  # a server's Retry-After is honoured up to this


def retry_after_s(exc: BaseException | None) -> float | None:
    """The wait a server asked for with ``Retry-After`` / ``retry-after-ms`` (None when it asked none)."""
    for holder in (getattr(exc, "response", None), exc):
        headers = getattr(holder, "headers", None) or getattr(holder, "litellm_response_headers", None)
        if not headers:
            continue
        try:
            ms = headers.get("retry-after-ms")
            if ms is not None:
                return max(0.0, float(ms) / 1000.0)
            value = headers.get("retry-after")
        except (AttributeError, TypeError, ValueError):
            continue
        if value is None:
            continue
        try:
            return max(0.0, float(value))
        except ValueError:
            from email.utils import parsedate_to_datetime

            try:
                return max(0.0, parsedate_to_datetime(str(value)).timestamp() - time.time())
            except (TypeError, ValueError):
                continue
    return None


class DeadlineReached(StepError):
    """The session's ``--timeout`` leaves no time for (another attempt of) an LLM call."""

    def __init__(self, message: str) -> None:
        super().__init__(message, error_type=ErrorType.TIMEOUT,
                         suggestion="the session's --timeout is spent; resume with --path and a longer --timeout")


def _failure(state: RetryCallState) -> BaseException | None:
    """The exception of the attempt just made (tenacity sets ``outcome`` before it asks stop and wait)."""
    return state.outcome.exception() if state.outcome is not None else None


def retryable(exc: BaseException | None) -> bool:
    """A failure worth another attempt: 408/409/425/429, a 5xx, a timeout or a connection error."""
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return status in (408, 409, 425, 429) or status >= 500
    import httpx

    return isinstance(exc, (httpx.TimeoutException, httpx.TransportError, TimeoutError, ConnectionError)) or \
        type(exc).__name__ in ("APIConnectionError", "APITimeoutError", "Timeout")


def call_with_retries(send: Callable[[float | None], R], *, max_retry: int, wait_s: float,
                      time_left: Callable[[], float | None]) -> tuple[R, int]:
    """``send(seconds_left)`` once, then again while its failure is :func:`retryable` and retries and time
    remain; returns its result and the attempts made.

    ``seconds_left`` is the time before the session deadline (None: none), for the attempt's own timeout.

    Raises:
        DeadlineReached: less than ``MIN_CALL_S`` left before an attempt, or the retries stopped at the deadline.
        Exception: the last attempt's failure otherwise. Either carries ``ft_attempts``, the attempts made.
    """
    from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

    attempts = 0

    def attempt() -> R:
        nonlocal attempts
        left = time_left()
        if left is not None and left < MIN_CALL_S:
            raise DeadlineReached(f"no LLM request sent: {left:.0f} s left before the session deadline")
        attempts += 1
        return send(left)

    backoff = wait_exponential(multiplier=wait_s, min=wait_s, max=max(wait_s, 60.0))

    def wait_for(state: RetryCallState) -> float:
        asked = retry_after_s(_failure(state))
        return min(asked, RETRY_AFTER_MAX_S) if asked is not None else backoff(state)

    stopped: list[float] = []

    def past_deadline(state: RetryCallState) -> bool:  # the next attempt would start too late: do not wait for it
        left = time_left()
        if left is not None and retryable(_failure(state)) and wait_for(state) + MIN_CALL_S > left:
            stopped.append(left)
            return True
        return False

    retries_spent = stop_after_attempt(max_retry + 1)

    def stop(state: RetryCallState) -> bool:
        return retries_spent(state) or past_deadline(state)

    retrying = Retrying(stop=stop, wait=wait_for, retry=retry_if_exception(retryable), reraise=True)
    try:
        return retrying(attempt), attempts
    except Exception as exc:
        if stopped and not isinstance(exc, DeadlineReached):
            exc = DeadlineReached(f"LLM retries stopped at the session deadline ({stopped[0]:.0f} s left) "
                                  f"after {attempts} attempt(s): {type(exc).__name__}: {exc}")
            exc.ft_attempts = attempts  # type: ignore[attr-defined]
            raise exc from None
        exc.ft_attempts = attempts  # type: ignore[attr-defined]
        raise
