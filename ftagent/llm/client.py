"""LLM client over LiteLLM: chat, JSON and code replies, continuation, retries, records, budget.

One retry layer only: LiteLLM's own retries (``num_retries``) and the OpenAI SDK's (``max_retries``)
are switched off, and tenacity retries 408/429/5xx, timeouts and connection errors with exponential
backoff (``MAX_RETRY`` retries after the first attempt, ``RETRY_WAIT_SECONDS`` as the base wait). So
``MAX_RETRY=2`` means at most 3 requests reach the server, never 3 × 3 × 3.

The session's ``--timeout`` is a hard bound: a client made for a loop step (:meth:`LLMClient.for_context`)
knows the time left; each attempt's timeout is capped by it, a retry whose wait would end past it is not
made, and a call with no time left is not sent (a TIMEOUT :class:`StepError`). A server's
``Retry-After`` (seconds or an HTTP date; ``retry-after-ms`` too) sets the wait before the next attempt.

litellm is imported lazily (on the first call) with ``LITELLM_LOCAL_MODEL_COST_MAP=True`` so that the
import does not fetch the price list from the network.
"""

from __future__ import annotations

import ast
import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from ftagent.core.errors import BudgetExhausted, EnvironmentFailure, ErrorType, StepError
from ftagent.core.redact import Redactor
from ftagent.core.settings import FTSettings, LLMSettings
from ftagent.llm.budget import counter_name, message_tokens
from ftagent.llm.records import LLMRecord, RecordWriter

if TYPE_CHECKING:
    from tenacity import RetryCallState

T = TypeVar("T", bound=BaseModel)
Message = dict[str, Any]

MAX_CONTINUATIONS = 6
CONTINUE_PROMPT = ("Your previous answer was cut off. Continue exactly where it stopped, without "
                   "repeating anything and without any preface.")
_FENCE_RE = re.compile(r"```[ \t]*([\w+.-]*)[^\n]*\n(.*?)```", re.DOTALL)
_THINK_RE = re.compile(r"^\s*<think>.*?</think>\s*", re.DOTALL)
_LANG_ALIASES = {"python": {"python", "py", "python3"}, "yaml": {"yaml", "yml"}, "json": {"json"}}


MIN_CALL_S = 5.0  # a request with less time left than this before the session deadline is not sent
RETRY_AFTER_MAX_S = 300.0  # a server's Retry-After is honoured up to this


class LLMCallError(StepError):
    """An LLM call failed for good (retries spent, or a reply that never became usable)."""

    def __init__(self, message: str, **kwargs: Any) -> None:
        super().__init__(message, error_type=ErrorType.LLM, **kwargs)


def litellm_module() -> ModuleType:
    """litellm, imported on first use with the bundled price list (no network fetch at import)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    return litellm


# --- reply parsing (pure functions, tested directly) ------------------------------------------------
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


def _check_code(code: str, language: str) -> str | None:
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


def _is_fenced_open(text: str) -> bool:
    return text.count("```") % 2 == 1


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


def _retryable(exc: BaseException | None) -> bool:
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return status in (408, 409, 425, 429) or status >= 500
    import httpx

    return isinstance(exc, (httpx.TimeoutException, httpx.TransportError, TimeoutError, ConnectionError)) or \
        type(exc).__name__ in ("APIConnectionError", "APITimeoutError", "Timeout")


class LLMClient:
    """Chat with the planner LLM; records every call and keeps the cost budget.

    Args:
        llm: the LLM settings (``CHAT_MODEL``, key, base URL, retries, timeout, model map, streaming).
        ft: the ``FT_*`` settings (for ``FT_LLM_BUDGET_USD`` and the judge key to redact); optional.
        session_dir: where ``llm/<n>.json`` records go; None writes no records.
        emit: called with an :class:`ftagent.engine.events.LLMCall` after every call (e.g. ``ctx.emit``).
        time_left: seconds left before the session deadline (None: no deadline), e.g. ``ctx.time_left``.
    """

    def __init__(self, llm: LLMSettings, ft: FTSettings | None = None, session_dir: Path | None = None,
                 emit: Callable[[Any], None] | None = None,
                 time_left: Callable[[], float | None] | None = None) -> None:
        self.llm = llm
        self.time_left = time_left or (lambda: None)
        self.ft = ft
        self.emit = emit
        secrets = [llm.openai_api_key.get_secret_value() if llm.openai_api_key else None]
        if ft is not None and ft.judge_api_key is not None:
            secrets.append(ft.judge_api_key.get_secret_value())
        self.redactor = Redactor(secrets)
        self.records = RecordWriter(session_dir)
        self.budget_usd = ft.llm_budget_usd if ft is not None else None
        self.total_cost_usd = self.records.spent_usd()

    @classmethod
    def for_context(cls, settings: Any, ctx: Any) -> LLMClient:
        """A client for a loop step: records into the step's session, events through ``ctx.emit``."""
        session = getattr(ctx, "session", None)
        return cls(settings.llm, settings.ft, session_dir=getattr(session, "dir", None),
                   emit=getattr(ctx, "emit", None), time_left=getattr(ctx, "time_left", None))

    # --- routing ------------------------------------------------------------------------------------
    def route(self, stage: str) -> dict[str, Any]:
        """Model, temperature and max_tokens for ``stage`` (``CHAT_MODEL_MAP``: first key found in it)."""
        out: dict[str, Any] = {"model": self.llm.chat_model, "temperature": self.llm.chat_temperature,
                               "max_tokens": self.llm.chat_max_tokens}
        for key, override in self.llm.chat_model_map.items():
            if key and key in stage:
                out.update({k: v for k, v in override.items() if k in out})
                break
        if not out["model"]:
            raise EnvironmentFailure("no LLM configured: set CHAT_MODEL (and OPENAI_API_KEY / OPENAI_API_BASE)")
        if self.llm.openai_api_base and "/" not in out["model"]:
            out["model"] = f"openai/{out['model']}"  # an OpenAI-compatible server at OPENAI_API_BASE
        return out

    # --- one request (with retries) -----------------------------------------------------------------
    def _request(self, messages: list[Message], route: dict[str, Any]) -> tuple[Any, int]:
        from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

        litellm = litellm_module()
        kwargs: dict[str, Any] = {
            "model": route["model"], "messages": messages, "timeout": self.llm.llm_timeout_seconds,
            "num_retries": 0, "max_retries": 0, "drop_params": True,
            "temperature": route["temperature"],
        }
        if route.get("max_tokens"):
            kwargs["max_tokens"] = route["max_tokens"]
        if self.llm.openai_api_base:
            kwargs["api_base"] = self.llm.openai_api_base
        if self.llm.openai_api_key is not None:
            kwargs["api_key"] = self.llm.openai_api_key.get_secret_value()
        elif self.llm.openai_api_base:
            kwargs["api_key"] = "not-needed"  # local OpenAI-compatible servers ignore it
        attempts = 0

        def attempt() -> Any:
            nonlocal attempts
            left = self.time_left()
            if left is not None and left < MIN_CALL_S:
                raise DeadlineReached(f"no LLM request sent: {left:.0f} s left before the session deadline")
            kwargs["timeout"] = self.llm.llm_timeout_seconds if left is None else \
                min(self.llm.llm_timeout_seconds, left)
            attempts += 1
            if not self.llm.chat_stream:
                return litellm.completion(**kwargs)
            chunks = list(litellm.completion(stream=True, stream_options={"include_usage": True}, **kwargs))
            return litellm.stream_chunk_builder(chunks, messages=messages)

        wait = self.llm.retry_wait_seconds
        backoff = wait_exponential(multiplier=wait, min=wait, max=max(wait, 60.0))

        def wait_for(state: RetryCallState) -> float:
            asked = retry_after_s(_failure(state))
            return min(asked, RETRY_AFTER_MAX_S) if asked is not None else backoff(state)

        stopped: list[float] = []

        def past_deadline(state: RetryCallState) -> bool:  # the next attempt would start too late: do not wait for it
            left = self.time_left()
            if left is not None and _retryable(_failure(state)) and wait_for(state) + MIN_CALL_S > left:
                stopped.append(left)
                return True
            return False

        retries_spent = stop_after_attempt(self.llm.max_retry + 1)

        def stop(state: RetryCallState) -> bool:
            return retries_spent(state) or past_deadline(state)

        retrying = Retrying(stop=stop, wait=wait_for,
                            retry=retry_if_exception(_retryable), reraise=True)
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

    def _cost(self, response: Any, model: str) -> float | None:
        """The call's cost in USD; None when LiteLLM has no price for the model (unknown, not $0)."""
        try:
            cost = litellm_module().completion_cost(completion_response=response, model=model)
        except Exception:  # noqa: BLE001 - LiteLLM raises for a model it has no price for
            return None
        return float(cost) if cost is not None else None

    def complete(self, messages: list[Message], stage: str) -> tuple[str, str | None]:
        """One logical completion (retries included): returns (text, finish_reason). Records it.

        Raises:
            BudgetExhausted: ``FT_LLM_BUDGET_USD`` is already spent (checked before sending).
            EnvironmentFailure: the server rejected the key (401/403).
            LLMCallError: any other failure, after the retries.
        """
        if self.budget_usd is not None:  # the records on disk include the gateway's (data script) calls
            self.total_cost_usd = max(self.total_cost_usd, self.records.spent_usd())
        if self.budget_usd is not None and self.total_cost_usd >= self.budget_usd:
            raise BudgetExhausted(f"LLM budget spent: ${self.total_cost_usd:.4f} of "
                                  f"FT_LLM_BUDGET_USD=${self.budget_usd:.4f}")
        route = self.route(stage)
        record = LLMRecord(stage=stage, model=route["model"], messages=messages,
                           prompt_tokens_measured=message_tokens(messages), token_counter=counter_name(),
                           prompt_budget=getattr(self.ft, "prompt_token_budget", None))
        t0 = time.monotonic()
        try:
            response, record.attempts = self._request(messages, route)
        except DeadlineReached as exc:
            record.attempts = getattr(exc, "ft_attempts", 0)
            record.latency_s = time.monotonic() - t0
            record.error = self.redactor.text(str(exc))[:2000]
            self._finish(record)
            raise
        except Exception as exc:  # noqa: BLE001 - classified below
            record.attempts = getattr(exc, "ft_attempts", 1)
            record.latency_s = time.monotonic() - t0
            status = getattr(exc, "status_code", None)
            record.error = self.redactor.text(f"{type(exc).__name__} (status {status}): {exc}")[:2000]
            self._finish(record)
            if status in (401, 403):
                raise EnvironmentFailure(f"the LLM server rejected the credentials for {route['model']}: "
                                         f"{record.error}") from None
            raise LLMCallError(f"LLM call for stage '{stage}' failed after {record.attempts} attempt(s): "
                               f"{record.error}", details={"status": status, "model": route["model"]}) from None
        record.latency_s = time.monotonic() - t0
        choice = response.choices[0]
        record.reply = choice.message.content or ""
        record.finish_reason = choice.finish_reason
        usage = getattr(response, "usage", None)
        record.prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        record.completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        record.cost_usd = self._cost(response, route["model"])
        self.total_cost_usd += record.cost_usd or 0.0
        self._finish(record)
        return record.reply, record.finish_reason

    def _finish(self, record: LLMRecord) -> None:
        record.total_cost_usd = self.total_cost_usd
        path = self.records.write(record, self.redactor)
        if self.emit is not None:
            from ftagent.engine.events import LLMCall

            self.emit(LLMCall(stage=record.stage, model=record.model, prompt_tokens=record.prompt_tokens,
                              completion_tokens=record.completion_tokens, cost_usd=record.cost_usd,
                              latency_s=round(record.latency_s, 3), record=str(path) if path else None,
                              error=record.error))

    # --- public API ----------------------------------------------------------------------------------
    def chat(self, messages: list[Message], stage: str = "chat") -> str:
        """The reply text; a reply cut off by ``max_tokens`` (or with an unclosed code fence) is
        continued up to ``MAX_CONTINUATIONS`` times and joined. A leading ``<think>`` block is dropped."""
        text, finish = self.complete(messages, stage)
        for _ in range(MAX_CONTINUATIONS - 1):
            if finish != "length" and not _is_fenced_open(text):
                break
            more, finish = self.complete(list(messages) + [{"role": "assistant", "content": text},
                                                           {"role": "user", "content": CONTINUE_PROMPT}], stage)
            text += more
        return strip_think(text)

    def chat_json(self, messages: list[Message], schema: type[T], stage: str = "json", max_tries: int = 3) -> T:
        """A reply validated into ``schema``; an unusable reply is re-asked with the error (bounded).

        Raises:
            LLMCallError: no valid reply after ``max_tries`` answers.
        """
        fields = ", ".join(schema.model_fields)
        convo, error = list(messages), ""
        for _ in range(max_tries):
            text = self.chat(convo, stage)
            try:
                return schema.model_validate(parse_json_reply(text))
            except (ValueError, ValidationError) as exc:
                error = str(exc)[:1500]
            convo = list(messages) + [
                {"role": "assistant", "content": text},
                {"role": "user", "content": f"That answer could not be used: {error}\nReply again with only "
                                            f"one JSON object with the fields: {fields}."}]
        raise LLMCallError(f"no valid JSON reply for stage '{stage}' after {max_tries} tries: {error}")

    def chat_code(self, messages: list[Message], language: Literal["python", "yaml"] = "python",
                  stage: str = "code", max_tries: int = 3) -> str:
        """The code of the fenced ```<language> block of the reply; re-asked when missing or unparsable.

        Raises:
            LLMCallError: no usable block after ``max_tries`` answers.
        """
        convo, error = list(messages), ""
        for _ in range(max_tries):
            text = self.chat(convo, stage)
            code = extract_code(text, language)
            error = f"the answer has no ```{language} code block" if code is None else \
                _check_code(code, language) or ""
            if code is not None and not error:
                return code
            convo = list(messages) + [
                {"role": "assistant", "content": text},
                {"role": "user", "content": f"That answer could not be used: {error}. Reply again with the "
                                            f"complete file in one ```{language} block."}]
        raise LLMCallError(f"no usable {language} block for stage '{stage}' after {max_tries} tries: {error}")
