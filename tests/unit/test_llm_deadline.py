"""--timeout is a hard bound for LLM calls, and a server's Retry-After is honoured (issue #22.5)."""

from __future__ import annotations

import time

import pytest

from ftagent.core.errors import ErrorType
from ftagent.llm import client as client_mod
from ftagent.llm import retry as retry_mod
from ftagent.llm.retry import DeadlineReached, retry_after_s
from tests.fakes.openai_server import FakeOpenAIServer, Reply
from tests.unit.test_llm_client import make_client


@pytest.fixture()
def server():
    with FakeOpenAIServer() as srv:
        yield srv


def _deadline_in(seconds: float):
    end = time.monotonic() + seconds
    return lambda: max(0.0, end - time.monotonic())


def test_retry_after_sets_the_wait_before_the_next_attempt(server):
    server.queue(Reply(status=429, retry_after="1"), "ok")
    client = make_client(server, retry_wait_seconds=0.01)
    assert client.chat([{"role": "user", "content": "x"}]) == "ok"
    first, second = server.chat_requests
    assert second.t - first.t >= 0.9  # the server asked for 1 s; the backoff alone would wait 0.01 s


def test_no_request_is_sent_when_the_deadline_has_passed(server, tmp_path):
    server.queue("never sent")
    client = make_client(server, tmp_path)
    client.time_left = lambda: 2.0
    with pytest.raises(DeadlineReached) as info:
        client.chat([{"role": "user", "content": "x"}])
    assert info.value.error_type is ErrorType.TIMEOUT and "--timeout" in info.value.suggestion
    assert server.chat_requests == []


def test_a_retry_that_would_end_past_the_deadline_is_not_made(server):
    server.queue(Reply(status=429, retry_after="30"), "too late")
    client = make_client(server, max_retry=10)
    client.time_left = _deadline_in(20.0)
    start = time.monotonic()
    with pytest.raises(DeadlineReached, match="session deadline"):
        client.chat([{"role": "user", "content": "x"}])
    assert len(server.chat_requests) == 1 and time.monotonic() - start < 5  # no 30 s wait, no 11 attempts


def test_each_attempt_is_cut_at_the_deadline_not_at_the_llm_timeout(server, monkeypatch):
    monkeypatch.setattr(retry_mod, "MIN_CALL_S", 0.2)
    server.queue(Reply("slow", delay=4.0), "never reached")
    client = make_client(server, max_retry=10, llm_timeout_seconds=60)
    client.time_left = _deadline_in(1.0)
    start = time.monotonic()
    with pytest.raises(DeadlineReached):
        client.chat_json([{"role": "user", "content": "x"}], schema=type(
            "S", (client_mod.BaseModel,), {"__annotations__": {"a": int}}))
    assert time.monotonic() - start < 3.5  # cut at ~1 s, not 60 s × 11 attempts × 3 re-asks


def test_retry_after_forms() -> None:
    class Exc(Exception):
        def __init__(self, headers):
            self.response = type("R", (), {"headers": headers})()

    assert retry_after_s(Exc({"retry-after": "7"})) == 7.0
    assert retry_after_s(Exc({"retry-after-ms": "250"})) == 0.25
    date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 60))
    assert 55 <= retry_after_s(Exc({"retry-after": date})) <= 61
    assert retry_after_s(Exc({})) is None and retry_after_s(ValueError("x")) is None
