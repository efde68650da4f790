"""The session routes OpenCompass's judge through its own gateway (stage ``judge``) when FT_JUDGE_* is set."""

from __future__ import annotations

from types import SimpleNamespace

import httpx

from ftagent.core.settings import load_settings
from ftagent.finetune.app import _route_judge


def test_judge_gateway_starts_for_the_session_only_when_a_judge_is_set(tmp_path, monkeypatch):
    for key in ("FT_JUDGE_API_KEY", "FT_JUDGE_MODEL", "FT_JUDGE_API_BASE"):
        monkeypatch.delenv(key, raising=False)
    session = SimpleNamespace(dir=tmp_path)
    settings = load_settings()
    _route_judge(settings, session, emit=lambda _event: None)
    assert settings.judge_route is None  # no judge configured: nothing listens

    monkeypatch.setenv("FT_JUDGE_API_KEY", "sk-real-judge-key")
    monkeypatch.setenv("FT_JUDGE_MODEL", "gpt-4o-mini")
    settings = load_settings()
    _route_judge(settings, session, emit=lambda _event: None)
    route = settings.judge_route
    try:
        assert route is not None and route.stage == "judge" and route.url.startswith("http://127.0.0.1:")
        assert route.records.dir == tmp_path / "llm"  # judge calls join the session's records and budget
        assert "sk-real-judge-key" not in route.token
        listing = httpx.get(f"{route.url}/models", headers={"Authorization": f"Bearer {route.token}"}, timeout=5)
        assert [m["id"] for m in listing.json()["data"]] == ["gpt-4o-mini"]
    finally:
        route.stop()
