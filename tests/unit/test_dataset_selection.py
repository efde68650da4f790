"""Dataset selection: the rule where it decides, the LLM where it cannot, the rule again on a bad answer."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from ftagent.core.settings import LLMSettings  # noqa: E402
from ftagent.datasets.prepare import dataset_candidates, selection_is_ambiguous  # noqa: E402
from ftagent.datasets.registry import resolve_dataset_choice  # noqa: E402
from ftagent.llm.client import LLMClient  # noqa: E402
from ftagent.planners.llm.select import select_datasets  # noqa: E402
from tests.fakes.openai_server import FakeOpenAIServer  # noqa: E402


def _client(server) -> LLMClient:
    return LLMClient(LLMSettings(chat_model="fake", openai_api_base=server.base_url, openai_api_key="x",
                                 chat_stream=False, max_retry=0))


def test_rule_and_candidates():
    assert resolve_dataset_choice(None, "aime25", []) == ["deepscaler"]
    assert resolve_dataset_choice("chemcot", "aime25", []) == ["chemcot"]
    assert not selection_is_ambiguous(None, "aime25", []) and selection_is_ambiguous(None, "mmlu", [])
    assert not selection_is_ambiguous("deepscaler", "mmlu", [])
    names = {c.name for c in dataset_candidates()}
    assert {"deepscaler", "chemcot", "demo_add"} <= names
    deep = next(c for c in dataset_candidates() if c.name == "deepscaler")
    assert deep.source.count("/") == 1 and deep.related_benchmarks  # an HF repo id, offline facts


def test_the_rule_decides_without_asking_when_it_can():
    with FakeOpenAIServer() as server:
        assert select_datasets("aime25", "math", related=[], client=_client(server)).datasets == ["deepscaler"]
        assert select_datasets("mmlu", "x", related=[], dataset="deepscaler", client=_client(server)).source == "rule"
        assert not server.chat_requests
    assert select_datasets("mmlu", "knowledge", related=[], client=None).datasets == []


def test_the_llm_picks_where_the_rule_cannot():
    reply = 'These fit.\n```json\n{"datasets": ["deepscaler", "nosuch", "deepscaler"], "reason": "maths"}\n```'
    with FakeOpenAIServer([reply]) as server:
        sel = select_datasets("mmlu", "Multiple-choice knowledge questions.", related=[], client=_client(server))
        sent = server.chat_requests[0].body["messages"][0]["content"]
    assert sel.source == "llm" and sel.datasets == ["deepscaler"] and sel.reason == "maths"
    assert "Multiple-choice knowledge questions." in sent and "`chemcot`" in sent and "The rule would choose: nothing" in sent


def test_a_bad_answer_falls_back_to_the_rule():
    with FakeOpenAIServer(['{"datasets": ["made_up"], "reason": "?"}']) as server:
        sel = select_datasets("mmlu", "x", related=[], client=_client(server))
    assert sel.source == "rule" and sel.datasets == [] and "unknown datasets" in sel.reason
    with FakeOpenAIServer() as server:
        server.fail_next(500)
        sel = select_datasets("mmlu", "x", related=[], client=_client(server))
    assert sel.source == "rule" and "no usable answer" in sel.reason


def test_the_selection_call_before_the_session_is_recorded_and_counted_once_it_exists(tmp_path):
    """Issue #22.6: the pre-session call reached no record, so FT_LLM_BUDGET_USD never counted it."""
    import json

    from ftagent.core.settings import FTSettings
    from ftagent.llm.records import RecordWriter

    reply = '{"datasets": ["deepscaler"], "reason": "maths"}'
    with FakeOpenAIServer([reply]) as server:
        client = LLMClient(LLMSettings(chat_model="fake", openai_api_base=server.base_url, openai_api_key="sk-sel-SECRET",
                                       chat_stream=False, max_retry=0), FTSettings())
        select_datasets("mmlu", "x", related=[], client=client)
    assert client.records.pending and not (tmp_path / "llm").exists()  # no session yet: kept in memory
    client.records.pending[0][0].cost_usd = 0.25  # the fake model has no price: give the call one
    (path,) = client.records.attach(tmp_path)
    record = json.loads(path.read_text())
    assert path.name == "1.json" and record["stage"] == "dataset_selection" and record["reply"] == reply
    assert "sk-sel-SECRET" not in path.read_text()
    assert RecordWriter(tmp_path).spent_usd() == 0.25  # the budget's ledger now holds it
