"""LLM client over LiteLLM: chat, JSON and code replies, continuation, retries, records, budget.

One retry layer only (:mod:`ftagent.llm.retry`): LiteLLM's own retries (``num_retries``) and the OpenAI
SDK's (``max_retries``) are switched off, so ``MAX_RETRY=2`` means at most 3 requests reach the server,
never 3 × 3 × 3. The session's ``--timeout`` is a hard bound: a client made for a loop step
(:meth:`LLMClient.for_context`) knows the time left, and the retry layer caps each attempt by it. Replies
are read by :mod:`ftagent.llm.replies` (JSON, fenced code, ``<think>`` blocks).

litellm is imported lazily (on the first call) with ``LITELLM_LOCAL_MODEL_COST_MAP=True`` so that the
import does not fetch the price list from the network.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from ftagent.core.errors import BudgetExhausted, EnvironmentFailure, ErrorType, StepError
from ftagent.core.redact import Redactor
from ftagent.core.settings import FTSettings, LLMSettings
from ftagent.llm.budget import counter_name, message_tokens
from ftagent.llm.records import LLMRecord, RecordWriter
from ftagent.llm.replies import check_code, extract_code, is_fenced_open, parse_json_reply, strip_think
from ftagent.llm.retry import DeadlineReached, call_with_retries

T = TypeVar("T", bound=BaseModel)
Message = dict[str, Any]

MAX_CONTINUATIONS = 6
CONTINUE_PROMPT = ("Your previous answer was cut off. Continue exactly where it stopped, without "
                   "repeating anything and without any preface.")


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
        """The response and the attempts it took (:func:`ftagent.llm.retry.call_with_retries`)."""
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

        def send(left: float | None) -> Any:
            kwargs["timeout"] = self.llm.llm_timeout_seconds if left is None else \
                min(self.llm.llm_timeout_seconds, left)
            if not self.llm.chat_stream:
                return litellm.completion(**kwargs)
            chunks = list(litellm.completion(stream=True, stream_options={"include_usage": True}, **kwargs))
            return litellm.stream_chunk_builder(chunks, messages=messages)

        return call_with_retries(send, max_retry=self.llm.max_retry, wait_s=self.llm.retry_wait_seconds,
                                 time_left=self.time_left)

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
            if finish != "length" and not is_fenced_open(text):
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
                check_code(code, language) or ""
            if code is not None and not error:
                return code
            convo = list(messages) + [
                {"role": "assistant", "content": text},
                {"role": "user", "content": f"That answer could not be used: {error}. Reply again with the "
                                            f"complete file in one ```{language} block."}]
        raise LLMCallError(f"no usable {language} block for stage '{stage}' after {max_tries} tries: {error}")
