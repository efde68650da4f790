"""LLMClient against a real HTTP server on 127.0.0.1 (tests/fakes/openai_server.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pydantic import BaseModel

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from ftagent.core.errors import BudgetExhausted, EnvironmentFailure  # noqa: E402
from ftagent.core.redact import REDACTED, Redactor  # noqa: E402
from ftagent.core.settings import FTSettings, LLMSettings  # noqa: E402
from ftagent.engine.event_log import EventLog  # noqa: E402
from ftagent.engine.events import read_events  # noqa: E402
from ftagent.llm.client import CONTINUE_PROMPT, LLMCallError, LLMClient  # noqa: E402
from ftagent.llm.replies import extract_code, parse_json_reply  # noqa: E402
from tests.fakes.openai_server import FakeOpenAIServer, Reply  # noqa: E402

KEY = "sk-unit-test-secret-0123456789abcdef"


class Idea(BaseModel):
    idea: str
    confidence: float


@pytest.fixture()
def server():
    with FakeOpenAIServer() as srv:
        yield srv


def make_client(server: FakeOpenAIServer, tmp_path: Path | None = None, emit=None, ft: FTSettings | None = None,
                **llm_kw) -> LLMClient:
    values = dict(chat_model="fake-model", openai_api_key=KEY, openai_api_base=server.base_url,
                  chat_stream=False, max_retry=2, retry_wait_seconds=0.01, llm_timeout_seconds=10,
                  chat_model_map={})
    values.update(llm_kw)
    return LLMClient(LLMSettings(**values), ft or FTSettings(), session_dir=tmp_path, emit=emit)


def test_chat_records_call_and_emits_event(server, tmp_path):
    log = EventLog(tmp_path / "events.jsonl")
    server.queue(Reply("hello there", usage=(11, 3)))
    client = make_client(server, tmp_path, emit=log.emit)
    assert client.chat([{"role": "user", "content": "hi"}], stage="proposal") == "hello there"
    record = json.loads((tmp_path / "llm" / "1.json").read_text())
    assert record["stage"] == "proposal" and record["reply"] == "hello there"
    assert (record["prompt_tokens"], record["completion_tokens"], record["attempts"]) == (11, 3, 1)
    assert record["model"] == "openai/fake-model" and record["latency_s"] > 0
    events = list(read_events(tmp_path / "events.jsonl"))
    assert [e.type for e in events] == ["llm_call"]
    assert events[0].record.endswith("1.json") and events[0].prompt_tokens == 11
    body = server.chat_requests[0].body
    assert body["model"] == "fake-model" and body["temperature"] == 0.5 and "stream" not in body


def test_two_500s_then_ok_reach_server_exactly_three_times(server, tmp_path):
    server.fail_next(500, 500)
    server.queue("finally")
    client = make_client(server, tmp_path)
    assert client.chat([{"role": "user", "content": "x"}]) == "finally"
    assert len(server.chat_requests) == 3
    assert json.loads((tmp_path / "llm" / "1.json").read_text())["attempts"] == 3


def test_400_is_not_retried(server):
    server.fail_next(400)
    server.queue("never reached")
    with pytest.raises(LLMCallError) as info:
        make_client(server).chat([{"role": "user", "content": "x"}])
    assert len(server.chat_requests) == 1
    assert info.value.details["status"] == 400


def test_429_retries_are_bounded_by_max_retry(server, tmp_path):
    server.fail_next(429, 429, 429, 429)
    with pytest.raises(LLMCallError, match="2 attempt"):
        make_client(server, tmp_path, max_retry=1).chat([{"role": "user", "content": "x"}])
    assert len(server.chat_requests) == 2
    assert "RateLimit" in json.loads((tmp_path / "llm" / "1.json").read_text())["error"]


def test_timeout_is_retried_then_fails_clearly(server):
    server.queue(Reply("slow", delay=1.5), Reply("slow", delay=1.5))
    with pytest.raises(LLMCallError, match="Timeout") as info:
        make_client(server, max_retry=1, llm_timeout_seconds=0.3).chat([{"role": "user", "content": "x"}])
    assert len(server.chat_requests) == 2
    assert "2 attempt" in str(info.value)


def test_bad_key_stops_the_session(server):
    server.fail_next(401)
    with pytest.raises(EnvironmentFailure, match="credentials"):
        make_client(server).chat([{"role": "user", "content": "x"}])
    assert len(server.chat_requests) == 1


def test_json_reask_with_validation_error(server, tmp_path):
    server.queue("I think we should raise the learning rate.", '```json\n{"idea": "raise lr", "confidence": 0.7}\n```')
    idea = make_client(server, tmp_path).chat_json([{"role": "user", "content": "idea?"}], Idea, stage="proposal")
    assert idea == Idea(idea="raise lr", confidence=0.7)
    assert len(server.chat_requests) == 2
    second = server.chat_requests[1].body["messages"]
    assert second[-2]["content"].startswith("I think") and "could not be used" in second[-1]["content"]
    assert "idea, confidence" in second[-1]["content"]


def test_json_gives_up_after_bounded_tries(server):
    server.queue("no", "still no", "nope", "unused")
    with pytest.raises(LLMCallError, match="3 tries"):
        make_client(server).chat_json([{"role": "user", "content": "?"}], Idea)
    assert len(server.chat_requests) == 3 and server.pending == 1


@pytest.mark.parametrize("text", [
    '{"idea": "a", "confidence": 1}',
    'Sure! ```json\n{"idea": "a", "confidence": 1}\n``` hope it helps',
    "<think>hmm {not json}</think>{'idea': 'a', 'confidence': 1,}",
    'Answer: {"idea": "a", "confidence": 1, "extra": null} done',
    "{'idea': 'a', 'confidence': 1, 'ok': true}",
])
def test_parse_json_reply_variants(text):
    assert Idea.model_validate(parse_json_reply(text)) == Idea(idea="a", confidence=1)


def test_parse_json_reply_rejects_prose():
    with pytest.raises(ValueError):
        parse_json_reply("no json here")


def test_truncated_reply_is_continued(server):
    server.queue(Reply("Here:\n```python\nx = 1\n", finish_reason="length"), Reply("y = 2\n```\n"))
    code = make_client(server).chat_code([{"role": "user", "content": "write"}], "python", stage="data_coder")
    assert code == "x = 1\ny = 2\n"
    assert len(server.chat_requests) == 2
    msgs = server.chat_requests[1].body["messages"]
    assert msgs[-1]["content"] == CONTINUE_PROMPT and msgs[-2]["content"].endswith("x = 1\n")


def test_unclosed_fence_counts_as_truncated(server):
    server.queue(Reply("```yaml\na: 1\n"), Reply("b: 2\n```"))
    assert make_client(server).chat_code([{"role": "user", "content": "w"}], "yaml") == "a: 1\nb: 2\n"


def test_code_reask_when_block_missing_or_broken(server):
    server.queue("I would use pandas.", "```python\ndef f(:\n```", "```python\nprint('ok')\n```")
    code = make_client(server).chat_code([{"role": "user", "content": "w"}], "python")
    assert code == "print('ok')\n"
    bodies = [r.body["messages"][-1]["content"] for r in server.chat_requests[1:]]
    assert "no ```python code block" in bodies[0] and "does not compile" in bodies[1]


def test_extract_code_prefers_language_tag():
    text = "```bash\nls\n```\n```yml\nlr: 1\n```\n```\nplain\n```"
    assert extract_code(text, "yaml") == "lr: 1\n"
    assert extract_code("```\nplain\n```", "python") == "plain\n"
    assert extract_code("nothing", "python") is None


def test_streaming(server, tmp_path):
    server.queue(Reply("a streamed reply that spans several chunks", usage=(7, 9)))
    client = make_client(server, tmp_path, chat_stream=True)
    assert client.chat([{"role": "user", "content": "s"}]) == "a streamed reply that spans several chunks"
    assert server.chat_requests[0].body["stream"] is True
    record = json.loads((tmp_path / "llm" / "1.json").read_text())
    assert record["completion_tokens"] == 9 and record["finish_reason"] == "stop"


def test_streaming_truncation_is_continued(server):
    server.queue(Reply("part one, ", finish_reason="length"), Reply("part two"))
    assert make_client(server, chat_stream=True).chat([{"role": "user", "content": "s"}]) == "part one, part two"


def test_stage_model_map(server):
    server.queue("a", "b")
    client = make_client(server, chat_model_map={"coder": {"model": "big-model", "temperature": 0.1}})
    client.chat([{"role": "user", "content": "x"}], stage="data_coder")
    client.chat([{"role": "user", "content": "x"}], stage="proposal")
    first, second = (r.body for r in server.chat_requests)
    assert (first["model"], first["temperature"]) == ("big-model", 0.1)
    assert (second["model"], second["temperature"]) == ("fake-model", 0.5)


def test_budget_stops_before_the_next_call(server, tmp_path):
    import litellm

    litellm.register_model({"openai/budget-model": {"input_cost_per_token": 0.001, "output_cost_per_token": 0.002,
                                                    "litellm_provider": "openai", "mode": "chat"}})
    server.queue(Reply("one", usage=(1000, 500)), "two")
    ft = FTSettings(llm_budget_usd=1.5)
    client = make_client(server, tmp_path, ft=ft, chat_model="openai/budget-model")
    assert client.chat([{"role": "user", "content": "x"}]) == "one"
    assert client.total_cost_usd == pytest.approx(2.0)
    with pytest.raises(BudgetExhausted, match="budget"):
        client.chat([{"role": "user", "content": "x"}])
    assert len(server.chat_requests) == 1
    # a resumed session (same session dir) remembers what was spent
    again = make_client(server, tmp_path, ft=ft, chat_model="openai/budget-model")
    assert again.total_cost_usd == pytest.approx(2.0)
    with pytest.raises(BudgetExhausted):
        again.chat([{"role": "user", "content": "x"}])
    assert len(server.chat_requests) == 1


def test_unknown_price_costs_zero(server, tmp_path):
    server.queue(Reply("x", usage=(1000, 1000)))
    client = make_client(server, tmp_path, ft=FTSettings(llm_budget_usd=0.01))
    client.chat([{"role": "user", "content": "x"}])
    assert client.total_cost_usd == 0.0


def test_key_never_reaches_records_or_events(server, tmp_path):
    log = EventLog(tmp_path / "events.jsonl")
    other = "hf_" + "A1b2C3d4E5f6G7h8I9j0"
    server.queue(f"echo {KEY} and {other}")
    server.fail_next(400)
    client = make_client(server, tmp_path, emit=log.emit)
    with pytest.raises(LLMCallError):
        client.chat([{"role": "user", "content": f"my key is {KEY}"}])
    client.chat([{"role": "user", "content": f"my key is {KEY}"}])
    dumped = "".join(p.read_text() for p in (tmp_path / "llm").glob("*.json"))
    dumped += (tmp_path / "events.jsonl").read_text()
    assert KEY not in dumped and other not in dumped and REDACTED in dumped
    # the key did go to the server as the bearer token (so the test is not vacuous)
    assert server.chat_requests[0].headers["authorization"] == f"Bearer {KEY}"


def test_redactor_patterns():
    r = Redactor(["my-configured-value"])
    text = r.text("a my-configured-value b sk-abcdefghijklmnop c Bearer xyz123456789 api_key=abc123def456")
    assert "my-configured-value" not in text and "sk-abc" not in text and "xyz123456789" not in text
    assert "abc123def456" not in text and text.startswith("a ")
    assert r.obj({"k": ["sk-abcdefghijklmnop"]}) == {"k": [REDACTED]}


def test_models_endpoint(server):
    import urllib.request

    data = json.loads(urllib.request.urlopen(server.base_url + "/models").read())
    assert data["data"][0]["id"] == "fake-model"
