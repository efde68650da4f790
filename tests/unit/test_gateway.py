"""The session's loopback LLM gateway: scripts get a URL and a token, never the key; every call is
counted (tokens, $, latency, unknown price = None) into the session's records and the shared budget;
FT_API_MAX_WORKERS is enforced; the budget answers 402 with a message."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest  # noqa: E402
from openai import APIStatusError, OpenAI  # noqa: E402

from ftagent.core.errors import BudgetExhausted  # noqa: E402
from ftagent.core.settings import FTSettings, LLMSettings  # noqa: E402
from ftagent.engine.event_log import EventLog  # noqa: E402
from ftagent.engine.events import read_events  # noqa: E402
from ftagent.llm.client import LLMClient  # noqa: E402
from ftagent.llm.gateway import LLMGateway  # noqa: E402
from tests.fakes.openai_server import FakeOpenAIServer, Reply  # noqa: E402

KEY = "sk-FAKE-SECRET-123456"


@pytest.fixture()
def upstream():
    with FakeOpenAIServer() as srv:
        yield srv


def _llm(upstream: FakeOpenAIServer, **kw) -> LLMSettings:
    return LLMSettings(chat_model="openai/planner", openai_api_key=KEY, openai_api_base=upstream.base_url,
                       chat_stream=False, max_retry=0, **kw)


def _ft(**kw) -> FTSettings:
    return FTSettings(strong_models=["gpt-4o"], weak_models=["weak-model"], **kw)


def _client(gw: LLMGateway) -> OpenAI:
    env = gw.script_env()
    return OpenAI(base_url=env["OPENAI_BASE_URL"], api_key=env["OPENAI_API_KEY"], max_retries=0)


def _records(session: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((session / "llm").glob("*.json"), key=lambda p: int(p.stem))]


def test_script_sees_only_loopback_url_and_token_and_calls_are_recorded(upstream, tmp_path):
    upstream.queue(Reply("hello from upstream", usage=(120, 30)))
    events = EventLog(tmp_path / "events.jsonl")
    with LLMGateway(_llm(upstream), _ft(), tmp_path, emit=events.emit) as gw:
        env = gw.script_env()
        assert env["OPENAI_API_BASE"].startswith("http://127.0.0.1:") and env["OPENAI_API_KEY"].startswith("ftgw-")
        assert KEY not in json.dumps(env) and upstream.base_url not in json.dumps(env)
        reply = _client(gw).chat.completions.create(model="weak-model",
                                                     messages=[{"role": "user", "content": "make rows"}])
    assert reply.choices[0].message.content == "hello from upstream" and reply.model == "weak-model"
    sent = upstream.chat_requests[0]
    assert sent.headers["authorization"] == f"Bearer {KEY}"  # the real key goes upstream only
    assert gw.token not in upstream.all_request_text()
    [record] = _records(tmp_path)
    assert record["stage"] == "data_script" and record["model"] == "weak-model"
    assert (record["prompt_tokens"], record["completion_tokens"]) == (120, 30)
    assert record["cost_usd"] is None  # no price known for "weak-model": unknown, not $0
    assert record["latency_s"] > 0 and record["reply"] == "hello from upstream"
    [event] = [e for e in read_events(tmp_path / "events.jsonl") if e.type == "llm_call"]
    assert event.stage == "data_script" and event.cost_usd is None and event.prompt_tokens == 120


def test_bad_token_unknown_model_and_upstream_errors(upstream, tmp_path):
    with LLMGateway(_llm(upstream), _ft(), tmp_path) as gw:
        bad = OpenAI(base_url=gw.url, api_key=KEY, max_retries=0)  # even the real key is not the token
        with pytest.raises(APIStatusError) as info:
            bad.chat.completions.create(model="weak-model", messages=[{"role": "user", "content": "x"}])
        assert info.value.status_code == 401
        with pytest.raises(APIStatusError) as info:
            _client(gw).chat.completions.create(model="gpt-4.5-expensive", messages=[{"role": "user", "content": "x"}])
        assert info.value.status_code == 400 and "weak-model" in str(info.value)
        upstream.fail_next(429)
        with pytest.raises(APIStatusError) as info:
            _client(gw).chat.completions.create(model="weak-model", messages=[{"role": "user", "content": "x"}])
        assert info.value.status_code == 429  # the script's own client may retry, as against the real API
    assert len(upstream.chat_requests) == 1  # refused requests never went upstream
    [record] = _records(tmp_path)
    assert "429" in record["error"] and KEY not in json.dumps(record)


def test_budget_covers_gateway_and_planner_and_stops_with_402(upstream, tmp_path):
    import litellm

    litellm.register_model({"openai/priced-model": {"input_cost_per_token": 0.001, "output_cost_per_token": 0.002,
                                                    "litellm_provider": "openai", "mode": "chat"}})
    upstream.queue(Reply("rows", usage=(1000, 500)))  # $1 + $1 = $2
    ft = FTSettings(strong_models=["priced-model"], weak_models=[], llm_budget_usd=1.5)
    with LLMGateway(_llm(upstream), ft, tmp_path) as gw:
        _client(gw).chat.completions.create(model="priced-model", messages=[{"role": "user", "content": "x"}])
        with pytest.raises(APIStatusError) as info:
            _client(gw).chat.completions.create(model="priced-model", messages=[{"role": "user", "content": "x"}])
    assert info.value.status_code == 402
    assert "FT_LLM_BUDGET_USD" in str(info.value) and "no more LLM calls" in str(info.value)
    assert _records(tmp_path)[0]["cost_usd"] == pytest.approx(2.0)
    planner = LLMClient(_llm(upstream), ft, session_dir=tmp_path)
    with pytest.raises(BudgetExhausted):  # the planner sees the data script's spend
        planner.chat([{"role": "user", "content": "propose"}])
    assert len(upstream.chat_requests) == 1


def test_max_workers_is_enforced(upstream, tmp_path):
    upstream.default = Reply("ok", delay=0.3)
    with LLMGateway(_llm(upstream), _ft(api_max_workers=2), tmp_path) as gw:
        client = _client(gw)
        threads = [threading.Thread(target=lambda: client.chat.completions.create(
            model="weak-model", messages=[{"role": "user", "content": "x"}])) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert gw.calls == 6 and gw.peak_in_flight == 2
    starts = sorted(r.t for r in upstream.chat_requests)
    assert starts[2] - starts[0] >= 0.25  # the third request waited for a free slot


def test_streaming_and_shared_record_numbering(upstream, tmp_path):
    upstream.queue("planner reply", Reply("streamed rows", usage=(10, 5)), "planner again")
    planner = LLMClient(_llm(upstream), _ft(), session_dir=tmp_path)  # numbers records from 1, like the gateway
    planner.chat([{"role": "user", "content": "a"}])
    with LLMGateway(_llm(upstream), _ft(), tmp_path) as gw:
        stream = _client(gw).chat.completions.create(model="gpt-4o", stream=True,
                                                      messages=[{"role": "user", "content": "b"}])
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    planner.chat([{"role": "user", "content": "c"}])
    assert text == "streamed rows"
    records = _records(tmp_path)
    assert [r["n"] for r in records] == [1, 2, 3]  # no writer overwrote another's record
    assert [r["stage"] for r in records] == ["chat", "data_script", "chat"]
    assert records[0]["cost_usd"] is None and records[2]["cost_usd"] is None  # the planner's "openai/planner": unknown
    assert records[1]["cost_usd"] == pytest.approx(10 * 2.5e-6 + 5 * 1e-5)  # gpt-4o's listed price


def test_data_step_env_holds_the_gateway_not_the_key(tmp_path):
    from types import SimpleNamespace

    from ftagent.tools.llamafactory.data_script import DataProcessor

    settings = SimpleNamespace(ft=_ft(), llm=LLMSettings(chat_model="gpt-4o", openai_api_key=KEY,
                                                          openai_api_base="https://api.example.com/v1"))
    scenario = SimpleNamespace(dataset_root="/data")
    with_gw = DataProcessor(scenario, settings, runner=None, input_columns=["question"], answer_column="answer", llm_gateway_url="http://127.0.0.1:5/v1",
                            llm_gateway_token="ftgw-tok").script_env()
    assert with_gw["OPENAI_API_KEY"] == "ftgw-tok" and with_gw["OPENAI_API_BASE"] == "http://127.0.0.1:5/v1"
    without = DataProcessor(scenario, settings, runner=None, input_columns=["question"], answer_column="answer").script_env()
    for env in (with_gw, without):
        assert KEY not in json.dumps(env) and "api.example.com" not in json.dumps(env)
    assert "OPENAI_API_KEY" not in without and without["EMBEDDING_MODEL"] == "text-embedding-3-small"
    assert "FT_TOKENIZER_DIR" not in without  # no model folder on this machine
    model = tmp_path / "model"
    model.mkdir()
    scenario.base_model_path = str(model)
    assert DataProcessor(scenario, settings, runner=None, input_columns=["question"], answer_column="answer").script_env()["FT_TOKENIZER_DIR"] == str(model)


def test_upstream_timeout_is_504_and_embeddings_use_embedding_model(upstream, tmp_path):
    upstream.queue(Reply("late", delay=2.0))
    seen = []

    def forward(kind, kwargs):
        if kind == "chat":
            from ftagent.llm.gateway import _litellm_forward

            return _litellm_forward(kind, kwargs)
        seen.append(kwargs)
        import litellm

        return litellm.EmbeddingResponse(model=kwargs["model"], data=[{"object": "embedding", "index": 0,
                                                                       "embedding": [0.1, 0.2]}],
                                         usage={"prompt_tokens": 3, "total_tokens": 3})

    with LLMGateway(_llm(upstream, llm_timeout_seconds=0.5), _ft(), tmp_path, forward=forward) as gw:
        with pytest.raises(APIStatusError) as info:
            _client(gw).chat.completions.create(model="weak-model", messages=[{"role": "user", "content": "x"}])
        assert info.value.status_code == 504
        emb = _client(gw).embeddings.create(model="text-embedding-3-small", input="a row")
        with pytest.raises(APIStatusError) as refused:
            _client(gw).embeddings.create(model="weak-model", input="a row")
    assert emb.data[0].embedding == [0.1, 0.2] and refused.value.status_code == 400
    assert seen[0]["input"] == "a row" and seen[0]["api_key"] == KEY
    stages = [r["stage"] for r in _records(tmp_path)]
    assert stages == ["data_script", "data_script:embedding"]
    assert _records(tmp_path)[1]["prompt_tokens"] == 3


def test_judge_gateway_has_its_own_upstream_stage_and_model_and_shares_the_budget(upstream, tmp_path):
    import litellm

    litellm.register_model({"openai/priced-judge": {"input_cost_per_token": 0.001, "output_cost_per_token": 0.002,
                                                    "litellm_provider": "openai", "mode": "chat"},
                            "openai/priced-rows": {"input_cost_per_token": 0.001, "output_cost_per_token": 0.002,
                                                   "litellm_provider": "openai", "mode": "chat"}})
    judge_key = "sk-JUDGE-SECRET-987654"
    ft = FTSettings(strong_models=["priced-rows"], weak_models=[], judge_model="priced-judge", judge_api_key=judge_key,
                    judge_api_base=upstream.base_url, llm_budget_usd=2.5)
    assert LLMGateway.for_judge(LLMSettings(), FTSettings()) is None  # no FT_JUDGE_API_KEY: no judge gateway
    upstream.queue(Reply("A", usage=(1000, 500)), Reply("B", usage=(1000, 500)))  # $2 each
    events = EventLog(tmp_path / "events.jsonl")
    # no planner LLM configured at all: the judge gateway needs only the FT_JUDGE_* settings
    with LLMGateway.for_judge(LLMSettings(), ft, tmp_path, emit=events.emit) as gw, \
            LLMGateway(_llm(upstream), ft, tmp_path) as data_gw:
        client = _client(gw)
        with pytest.raises(APIStatusError) as info:  # only the judge model is allowed
            client.chat.completions.create(model="priced-rows", messages=[{"role": "user", "content": "x"}])
        assert info.value.status_code == 400
        reply = client.chat.completions.create(model="priced-judge", messages=[{"role": "user", "content": "grade"}])
        assert reply.choices[0].message.content == "A"
        with pytest.raises(APIStatusError) as info:  # $2 of $2.5 spent: the data script gets one more call
            _client(data_gw).chat.completions.create(model="priced-rows", messages=[{"role": "user", "content": "x"}])
            _client(data_gw).chat.completions.create(model="priced-rows", messages=[{"role": "user", "content": "x"}])
        assert info.value.status_code == 402
        with pytest.raises(APIStatusError) as info:  # the judge sees the data script's spend too
            client.chat.completions.create(model="priced-judge", messages=[{"role": "user", "content": "grade"}])
        assert info.value.status_code == 402 and gw.refused == 1 and data_gw.refused == 1
        assert "rule-based score" in info.value.message and "without an LLM" not in info.value.message
        assert [m.id for m in client.models.list()] == ["priced-judge"]  # a listing is no refused call
        assert gw.refused == 1
    assert [r.headers.get("authorization") for r in upstream.chat_requests][0] == f"Bearer {judge_key}"
    records = _records(tmp_path)
    assert [r["stage"] for r in records] == ["judge", "data_script"]
    assert records[0]["model"] == "priced-judge" and records[0]["cost_usd"] == pytest.approx(2.0)
    assert records[0]["prompt_tokens"] == 1000 and records[0]["completion_tokens"] == 500
    assert judge_key not in (tmp_path / "llm" / "1.json").read_text()
    calls = [e for e in read_events(tmp_path / "events.jsonl") if e.type == "llm_call"]
    assert [c.stage for c in calls] == ["judge"]
