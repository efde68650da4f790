"""Issue 34 item 7: credentials inside OPENAI_API_BASE (URL userinfo, query tokens) never reach the disk.

A session is written the way ``ftagent run`` writes one (settings dumped into the session config and the
``session_start`` event, an error message that quotes the URL, a snapshot, the report), then every file
is grepped.
"""

from __future__ import annotations

from pathlib import Path

from ftagent.core.redact import REDACTED, mask_obj, mask_text
from ftagent.core.settings import load_settings
from ftagent.engine.events import Message, SessionEnd, SessionStart
from ftagent.engine.session import Session, write_atomic
from ftagent.views.report import write_report

PASSWORD = "pa55-w0rd-xyz"
QUERY_TOKEN = "qt-0123456789abcdef"
BASE = f"https://alice:{PASSWORD}@llm.example.com/v1?api_key={QUERY_TOKEN}&model=x"


def _all_text(root: Path) -> str:
    return "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in root.rglob("*") if p.is_file())


def test_session_files_hold_no_url_credentials(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_BASE", BASE)
    monkeypatch.setenv("OPENAI_API_KEY", "plain-configured-key-1234")
    settings = load_settings()
    session = Session.create(tmp_path / "log", config={"settings": settings.redacted()})
    session.events.emit(SessionStart(session_id=session.state.session_id, settings=settings.redacted()))
    # an error text quoting the raw URL, as an LLM client error does: masked by the writer, not the caller
    session.events.emit(Message(level="error", text=f"connection refused: {BASE} (key plain-configured-key-1234)"))
    session.state.config["last_error"] = f"POST {BASE}/chat/completions failed"
    session.save(0, 0, "propose")
    session.events.emit(SessionEnd(status="env_error", message=f"LLM at {BASE} unreachable"))
    write_report(session.dir)
    write_atomic(session.dir / "other.txt", f"any file written atomically: {BASE}")

    text = _all_text(session.dir)
    assert PASSWORD not in text and QUERY_TOKEN not in text and "alice" not in text
    assert "plain-configured-key-1234" not in text  # a configured SecretStr is masked everywhere
    assert "llm.example.com/v1" in text and REDACTED in text  # the host stays readable
    assert "llm.example.com/v1" in (session.dir / "report.md").read_text()  # the report's "- ended:" line
    # the files still parse: a resume reads the masked snapshot
    _, snap = Session.load(session.dir)
    assert snap.exists()


def test_mask_text_url_shapes():
    assert mask_text("https://u:p4ss@h.io/v1") == f"https://{REDACTED}@h.io/v1"
    assert mask_text("http://tok3n@h.io") == f"http://{REDACTED}@h.io"
    assert mask_text("https://h.io/v1?access_token=abc&x=1") == f"https://h.io/v1?access_token={REDACTED}&x=1"
    assert mask_text("https://h.io/s?X-Amz-Signature=ff00&design=blue") == \
        f"https://h.io/s?X-Amz-Signature={REDACTED}&design=blue"
    assert mask_text("https://h.io/v1") == "https://h.io/v1"  # nothing to mask: unchanged
    assert mask_obj({"api_base": "https://a:b1234@h"}) == {"api_base": f"https://{REDACTED}@h"}
