"""The LLM calls view: events joined with their records, drawn with every prompt and reply."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from ftagent.core.settings import FTSettings, LLMSettings  # noqa: E402
from ftagent.llm.client import LLMClient  # noqa: E402
from ftagent.ui.llm_calls import call_views, summary_rows  # noqa: E402
from tests.fakes.openai_server import FakeOpenAIServer  # noqa: E402

SECRET = "sk-ui-test-SECRET-123456"


def _session_with_calls(tmp_path: Path) -> tuple[Path, list[dict]]:
    events: list[dict] = []
    with FakeOpenAIServer(["first reply", "second reply"]) as server:
        llm = LLMSettings(chat_model="fake", openai_api_base=server.base_url, openai_api_key=SECRET,
                          chat_stream=False, max_retry=0)
        client = LLMClient(llm, FTSettings(), session_dir=tmp_path / "s", emit=lambda e: events.append(e.model_dump()))
        client.chat([{"role": "user", "content": f"prompt one with the key {SECRET}"}], stage="proposal")
        client.chat([{"role": "user", "content": "prompt two"}], stage="config_coder")
    return tmp_path / "s", events


def test_call_views_join_events_and_records(tmp_path):
    session, events = _session_with_calls(tmp_path)
    views = call_views(events, session)
    assert [v.stage for v in views] == ["proposal", "config_coder"] and [v.n for v in views] == [1, 2]
    first = views[0]
    assert first.reply == "first reply" and first.messages[0]["role"] == "user"
    assert "prompt one" in first.messages[0]["content"] and SECRET not in first.messages[0]["content"]
    assert first.prompt_tokens and first.prompt_tokens_measured and first.prompt_budget == 24000
    assert first.latency_s is not None and "proposal" in first.title()
    rows = summary_rows(views)
    assert rows[1]["stage"] == "config_coder" and rows[1]["measured"] > 0
    # a copied log folder: the record is found next to the session by its file name
    moved = tmp_path / "copy"
    shutil.copytree(session, moved)
    shutil.rmtree(session)
    again = call_views(events, moved)
    assert again[0].reply == "first reply" and not again[0].missing_record
    assert call_views(events, None)[0].missing_record  # without it, the event alone


def test_view_draws_prompts_and_replies(tmp_path):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    session, events = _session_with_calls(tmp_path)
    data = tmp_path / "calls.json"
    data.write_text(json.dumps({"events": events, "session": str(session)}))

    def app(path: str) -> None:
        import json as _json
        from pathlib import Path as _Path

        from ftagent.ui.llm_calls import show_llm_calls

        payload = _json.loads(_Path(path).read_text())
        show_llm_calls(payload["events"], _Path(payload["session"]))

    at = AppTest.from_function(app, args=(str(data),), default_timeout=60).run()
    assert not at.exception, at.exception
    titles = [e.label for e in at.expander]
    assert len(titles) == 2 and titles[0].startswith("#1 proposal")
    codes = [c.value for c in at.code]
    assert any("prompt one" in c for c in codes) and "second reply" in codes
