"""The session's loopback LLM gateway: how generated code (``process_data.py``) reaches an LLM.

A data script never sees the real API key or base URL. ftagent runs this small OpenAI-compatible
forwarder on ``127.0.0.1`` for the session and gives the script only its URL and a per-session token
(``OPENAI_API_BASE`` / ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``). Each request is checked and forwarded
through LiteLLM with the real credentials:

* ``Authorization: Bearer <token>`` must match (else 401); the model must be one of the configured
  pools (``FT_STRONG_MODELS``, ``FT_WEAK_MODELS``, ``CHAT_MODEL``, ``CHAT_MODEL_MAP``; embeddings:
  ``EMBEDDING_MODEL``), else 400;
* at most ``FT_API_MAX_WORKERS`` requests are forwarded at once (a semaphore; the others wait);
* every call is recorded like a planner call (``<session>/llm/<n>.json``, stage ``data_script``, an
  ``llm_call`` event): tokens, cost, latency; a model without a known price has ``cost_usd=None``
  (unknown, never $0);
* ``FT_LLM_BUDGET_USD`` covers these calls and the planner's together (the records on disk are the
  ledger): once spent, requests get HTTP 402 with a message saying so, which the script's error log
  carries into the loop's feedback. Requests already in flight when the budget runs out finish, so
  the spend can pass the budget by at most ``FT_API_MAX_WORKERS`` calls.

The same class serves OpenCompass's LLM judge (:meth:`LLMGateway.for_judge`): stage ``judge``,
upstream = ``FT_JUDGE_MODEL`` / ``FT_JUDGE_API_BASE`` / ``FT_JUDGE_API_KEY``, the judge model the only
one allowed; its calls go into the same records and the same budget. ``refused`` counts the 402s
(budget spent) so an evaluation can tell that some items were not re-checked by the judge.

Upstream failures keep their HTTP status (429, 500, 504 for a timeout), so the script's own client
retries as it would against the real API. Only the stdlib HTTP server and LiteLLM are used (LiteLLM's
own proxy needs a database and many more dependencies).
"""

from __future__ import annotations

import hmac
import json
import secrets
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from ftagent.core.redact import Redactor
from ftagent.core.settings import FTSettings, LLMSettings
from ftagent.llm.client import litellm_module
from ftagent.llm.records import LLMRecord, RecordWriter

STAGE = "data_script"
_JUDGE_HINT = ("the judge re-checks no more rule misses: items keep their rule-based score; raise "
               "FT_LLM_BUDGET_USD to judge again")
JUDGE_STAGE = "judge"
MAX_BODY = 32 << 20
_PASS_PARAMS = {"temperature", "top_p", "max_tokens", "max_completion_tokens", "n", "stop", "seed",
                "response_format", "presence_penalty", "frequency_penalty", "logprobs", "top_logprobs",
                "tools", "tool_choice", "reasoning_effort", "user"}


class GatewayError(Exception):
    """A request the gateway answers with an error status (OpenAI-style body)."""

    def __init__(self, status: int, message: str, code: str = "gateway_error") -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


def price_of(response: Any, model: str, call_type: str = "completion") -> float | None:
    """The call's cost in USD from LiteLLM's price list; None when the model's price is unknown."""
    try:
        cost = litellm_module().completion_cost(completion_response=response, model=model, call_type=call_type)
    except Exception:  # noqa: BLE001 - LiteLLM raises for models it has no price for
        return None
    return float(cost) if cost is not None else None


class LLMGateway:
    """An OpenAI-compatible forwarder on 127.0.0.1 for one session (start/stop or a ``with`` block).

    Args:
        llm: the LLM settings (the real key and base URL stay here).
        ft: the ``FT_*`` settings (model pools, ``FT_API_MAX_WORKERS``, ``FT_LLM_BUDGET_USD``).
        session_dir: where records go (``<session>/llm/``); None writes none (budget then counts only
            this gateway's calls).
        emit: called with an ``llm_call`` event after every forwarded call.
        forward: ``(kind, kwargs) -> response`` replacing LiteLLM (tests); kind is ``chat`` or ``embedding``.
        stage: the records' stage (``data_script``; ``judge`` for OpenCompass's judge).
        api_key, api_base: the upstream's credentials (default: ``llm``'s ``OPENAI_API_KEY`` / ``OPENAI_API_BASE``).
        models: the chat models clients may ask for (default: the data-script pools of ``ft``/``llm``).
    """

    def __init__(self, llm: LLMSettings, ft: FTSettings, session_dir: Path | None = None,
                 emit: Callable[[Any], None] | None = None,
                 forward: Callable[[str, dict[str, Any]], Any] | None = None, *, stage: str = STAGE,
                 api_key: SecretStr | None = None, api_base: str | None = None,
                 models: list[str] | None = None) -> None:
        self.llm, self.ft, self.emit, self.stage = llm, ft, emit, stage
        custom = api_key is not None or api_base is not None
        self.api_key = api_key if custom else llm.openai_api_key
        self.api_base = api_base if custom else llm.openai_api_base
        self._models = models
        self.refused = 0  # requests answered 402 (budget spent)
        self.token = "ftgw-" + secrets.token_urlsafe(24)
        keys = [llm.openai_api_key.get_secret_value() if llm.openai_api_key else None,
                ft.judge_api_key.get_secret_value() if ft.judge_api_key else None,
                self.api_key.get_secret_value() if self.api_key else None, self.token]
        self.redactor = Redactor(keys)
        self.records = RecordWriter(session_dir)
        self.budget_usd = ft.llm_budget_usd
        self.max_workers = ft.api_max_workers
        self._slots = threading.BoundedSemaphore(ft.api_max_workers)
        self._forward = forward or _litellm_forward
        self._lock = threading.Lock()
        self._own_spent = 0.0
        self.in_flight = 0
        self.peak_in_flight = 0
        self.calls = 0
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @classmethod
    def for_judge(cls, llm: LLMSettings, ft: FTSettings, session_dir: Path | None = None,
                  emit: Callable[[Any], None] | None = None,
                  forward: Callable[[str, dict[str, Any]], Any] | None = None) -> LLMGateway | None:
        """The gateway of OpenCompass's LLM judge (stage ``judge``); None when no judge is configured."""
        if ft.judge_api_key is None or not ft.judge_model:
            return None
        return cls(llm, ft, session_dir, emit, forward, stage=JUDGE_STAGE, api_key=ft.judge_api_key,
                   api_base=ft.judge_api_base or "", models=[ft.judge_model])

    # --- life cycle ------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """The base URL a script uses (``http://127.0.0.1:<port>/v1``)."""
        assert self._httpd is not None, "gateway not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def start(self) -> LLMGateway:
        """Listen on an ephemeral loopback port in a daemon thread."""
        handler = type("GatewayHandler", (_Handler,), {"gateway": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="ftagent-llm-gateway", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening (requests in progress finish)."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> LLMGateway:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def script_env(self) -> dict[str, str]:
        """What a data script gets: the loopback URL and the token, under the OpenAI SDK's names."""
        return {"OPENAI_API_BASE": self.url, "OPENAI_BASE_URL": self.url, "OPENAI_API_KEY": self.token}

    # --- policy ----------------------------------------------------------------------------------
    def allowed_models(self, kind: str = "chat") -> list[str]:
        """The model names a script may ask for."""
        if self._models is not None:  # a gateway for one purpose (the judge): chat only
            return [] if kind == "embedding" else list(self._models)
        if kind == "embedding":
            return [self.llm.embedding_model]
        names = [*self.ft.strong_models, *self.ft.weak_models, self.llm.chat_model or ""]
        names += [str(v.get("model", "")) for v in self.llm.chat_model_map.values()]
        return list(dict.fromkeys(n for n in names if n))

    def spent_usd(self) -> float:
        """Known spend of the session so far: every record on disk (planner and gateway)."""
        if self.records.dir is None:
            return self._own_spent
        return self.records.spent_usd()

    def check(self, token: str | None, model: str | None, kind: str, *, count: bool = True) -> None:
        """Authorise one request; ``count=False`` for a listing (``GET /models``), which is no refused call.

        Raises:
            GatewayError: 401 bad token, 400 unknown model, 402 budget spent.
        """
        if token is None or not hmac.compare_digest(token.encode(), self.token.encode()):
            raise GatewayError(401, "invalid gateway token (use OPENAI_API_KEY from the environment)",
                               "invalid_api_key")
        allowed = self.allowed_models(kind)
        if model not in allowed:
            raise GatewayError(400, f"model {model!r} is not available through this gateway ({self.stage}); use one of "
                                    f"{', '.join(allowed)}", "model_not_allowed")
        if self.budget_usd is not None:
            spent = self.spent_usd()
            if spent >= self.budget_usd:
                if count:
                    with self._lock:
                        self.refused += 1
                hint = (_JUDGE_HINT if self.stage == "judge" else
                        "generate the data without an LLM, or raise the budget")
                raise GatewayError(402, f"LLM budget spent: ${spent:.4f} of FT_LLM_BUDGET_USD=${self.budget_usd:.4f}; "
                                        f"no more LLM calls in this session ({hint})", "budget_exceeded")

    # --- one call --------------------------------------------------------------------------------
    def call(self, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        """Forward one authorised request; record it; return the OpenAI-style response body.

        Raises:
            GatewayError: the upstream error's status and (redacted) message.
        """
        model = str(body.get("model"))
        record = LLMRecord(stage=self.stage if kind == "chat" else f"{self.stage}:embedding", model=model,
                           messages=body.get("messages") or [{"role": "input", "content": body.get("input")}])
        kwargs = self._upstream_kwargs(kind, body, model)
        with self._slots:
            with self._lock:
                self.in_flight += 1
                self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            t0 = time.monotonic()
            try:
                response = self._forward(kind, kwargs)
            except Exception as exc:  # noqa: BLE001 - every upstream failure becomes an HTTP status
                record.latency_s = time.monotonic() - t0
                status = getattr(exc, "status_code", None)
                if "timeout" in type(exc).__name__.lower():
                    status = 504  # the upstream did not answer in LLM_TIMEOUT_SECONDS
                elif not (isinstance(status, int) and 400 <= status < 600):
                    status = 502
                record.error = self.redactor.text(f"{type(exc).__name__} (status {status}): {exc}")[:2000]
                self._finish(record)
                raise GatewayError(status, f"upstream LLM error: {record.error}", "upstream_error") from None
            finally:
                with self._lock:
                    self.in_flight -= 1
        record.latency_s = time.monotonic() - t0
        data = json.loads(response.model_dump_json()) if hasattr(response, "model_dump_json") else dict(response)
        usage = data.get("usage") or {}
        record.prompt_tokens = int(usage.get("prompt_tokens") or 0)
        record.completion_tokens = int(usage.get("completion_tokens") or 0)
        if kind == "chat":
            choice = (data.get("choices") or [{}])[0]
            record.reply = str((choice.get("message") or {}).get("content") or "")
            record.finish_reason = choice.get("finish_reason")
        record.cost_usd = price_of(response, kwargs["model"], "completion" if kind == "chat" else "embedding")
        self._finish(record)
        data["model"] = model
        return data

    def _upstream_kwargs(self, kind: str, body: dict[str, Any], model: str) -> dict[str, Any]:
        route = f"openai/{model}" if self.api_base and "/" not in model else model
        kwargs: dict[str, Any] = {"model": route, "timeout": self.llm.llm_timeout_seconds, "num_retries": 0,
                                  "max_retries": 0, "drop_params": True}
        if kind == "chat":
            kwargs["messages"] = body.get("messages") or []
            kwargs.update({k: v for k, v in body.items() if k in _PASS_PARAMS})
        else:
            kwargs["input"] = body.get("input")
        if self.api_base:
            kwargs["api_base"] = self.api_base
        if self.api_key is not None:
            kwargs["api_key"] = self.api_key.get_secret_value()
        elif self.api_base:
            kwargs["api_key"] = "not-needed"
        return kwargs

    def _finish(self, record: LLMRecord) -> None:
        with self._lock:
            self.calls += 1
            prior = self.spent_usd()
            self._own_spent += record.cost_usd or 0.0
            record.total_cost_usd = prior + (record.cost_usd or 0.0)
            path = self.records.write(record, self.redactor)
        if self.emit is not None:
            from ftagent.engine.events import LLMCall

            try:
                self.emit(LLMCall(stage=record.stage, model=record.model, prompt_tokens=record.prompt_tokens,
                                  completion_tokens=record.completion_tokens, cost_usd=record.cost_usd,
                                  latency_s=round(record.latency_s, 3), record=str(path) if path else None,
                                  error=record.error))
            except Exception:  # noqa: BLE001 - an event problem must not fail the script's request
                import logging

                logging.getLogger(__name__).debug("llm_call event failed", exc_info=True)


def _litellm_forward(kind: str, kwargs: dict[str, Any]) -> Any:
    litellm = litellm_module()
    return litellm.completion(**kwargs) if kind == "chat" else litellm.embedding(**kwargs)


class _Handler(BaseHTTPRequestHandler):
    gateway: LLMGateway
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:  # requests are recorded, not printed
        pass

    def _send(self, status: int, obj: Any) -> None:
        raw = json.dumps(obj, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _error(self, err: GatewayError) -> None:
        self._send(err.status, {"error": {"message": err.message, "type": err.code, "code": err.code}})

    def _token(self) -> str | None:
        auth = self.headers.get("Authorization", "")
        if auth.lower().startswith("bearer "):
            return auth[7:].strip()
        return self.headers.get("api-key")

    def do_GET(self) -> None:  # noqa: N802 - http.server API
        if not self.path.rstrip("/").endswith("/models"):
            return self._error(GatewayError(404, f"no such endpoint: {self.path}", "not_found"))
        try:
            self.gateway.check(self._token(), self.gateway.allowed_models()[0], "chat", count=False)
        except GatewayError as err:
            if err.status == 401:
                return self._error(err)
        models = self.gateway.allowed_models() + self.gateway.allowed_models("embedding")
        self._send(200, {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "ftagent"}
                                                     for m in models]})

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        path = self.path.split("?", 1)[0].rstrip("/")
        kind = "chat" if path.endswith("/chat/completions") else "embedding" if path.endswith("/embeddings") else None
        try:
            length = int(self.headers.get("Content-Length") or 0)
            if kind is None:
                raise GatewayError(404, f"no such endpoint: {self.path}", "not_found")
            if length > MAX_BODY:
                raise GatewayError(413, "request body too large", "too_large")
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError as exc:
                raise GatewayError(400, f"request body is not JSON: {exc}", "bad_request") from None
            self.gateway.check(self._token(), body.get("model"), kind)
            data = self.gateway.call(kind, body)
        except GatewayError as err:
            return self._error(err)
        if kind == "chat" and body.get("stream"):
            return self._stream(data, bool((body.get("stream_options") or {}).get("include_usage")))
        self._send(200, data)

    def _stream(self, data: dict[str, Any], include_usage: bool) -> None:
        """Answer a ``stream=true`` request with the whole reply as SSE chunks (forwarded unstreamed)."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        base = {"id": data.get("id", "ftgw"), "object": "chat.completion.chunk",
                "created": data.get("created", int(time.time())), "model": data.get("model")}
        events = []
        for choice in data.get("choices") or []:
            msg = choice.get("message") or {}
            events.append({**base, "choices": [{"index": choice.get("index", 0), "finish_reason": None,
                                                "delta": {"role": "assistant", "content": msg.get("content") or ""}}]})
            events.append({**base, "choices": [{"index": choice.get("index", 0), "delta": {},
                                                "finish_reason": choice.get("finish_reason") or "stop"}]})
        if include_usage:
            events.append({**base, "choices": [], "usage": data.get("usage")})
        for event in events:
            self.wfile.write(f"data: {json.dumps(event, ensure_ascii=False)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True
