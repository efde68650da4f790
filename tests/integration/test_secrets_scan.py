"""A full session with recognisable fake secrets: the keys appear in no log, event, snapshot, LLM
record, workspace file, FT_FILE_PATH file, console output, nor in the environment of the generated
data script, which reaches the LLM only through the session's loopback gateway (and is counted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ftagent.engine.events import read_events
from ftagent.finetune.app import FinetuneOptions, run_finetune
from ftagent.planners.heuristic.planner import HeuristicCoder
from tests.fakes.openai_server import FakeOpenAIServer

pytestmark = pytest.mark.integration
KEY = "sk-FAKE-SECRET-123456"
JUDGE_KEY = "sk-FAKE-JUDGE-654321"

# appended to the heuristic planner's process_data.py: dump the environment, call the LLM as a script would
SCRIPT_PROBE = '''

import json as _json, os as _os, urllib.request as _rq
_json.dump(dict(_os.environ), open("script_env.json", "w"))
_req = _rq.Request(_os.environ["OPENAI_API_BASE"] + "/chat/completions", method="POST",
                   data=_json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "rephrase"}]}).encode(),
                   headers={"Authorization": "Bearer " + _os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"})
open("llm_reply.txt", "w").write(_json.load(_rq.urlopen(_req, timeout=60))["choices"][0]["message"]["content"])
'''


class EnvDumpingCoder(HeuristicCoder):
    """The heuristic coder, whose data script also dumps its environment and makes one LLM call."""

    def code(self, hypothesis, trace, workspace, feedback, ctx):
        result = super().code(hypothesis, trace, workspace, feedback, ctx)
        script = Path(workspace) / "process_data.py"
        script.write_text(script.read_text(encoding="utf-8") + SCRIPT_PROBE, encoding="utf-8")
        return result


def test_fake_keys_never_leak_in_a_full_session(tmp_path, monkeypatch, tools_env, capfd):
    monkeypatch.chdir(tmp_path)
    with FakeOpenAIServer(default="a rephrased row") as upstream:
        env = {"FT_FILE_PATH": tmp_path / "files", "LOG_PATH": tmp_path / "log", "WORKSPACE_PATH": tmp_path / "ws",
               "FT_TOOLS_ENV": tools_env, "FT_ENV_TYPE": "local", "FT_PLANNER": "heuristic",
               "FT_CODER": f"{__name__}:EnvDumpingCoder", "CHAT_MODEL": "gpt-4o", "OPENAI_API_KEY": KEY,
               "OPENAI_API_BASE": upstream.base_url, "FT_JUDGE_API_KEY": JUDGE_KEY, "FT_BENCHMARK_LIMIT": "10",
               "CHAT_STREAM": "false"}
        for name, value in env.items():
            monkeypatch.setenv(name, str(value))
        summary = run_finetune(FinetuneOptions(benchmark="demo_add", base_model="builtin/tiny-qwen2", loop_n=1))
        upstream_auth = [r.headers.get("authorization") for r in upstream.chat_requests]
        upstream_url = upstream.base_url
    out, err = capfd.readouterr()
    assert summary.status == "completed", summary
    # the data script (debug and full run) called the LLM through the gateway, with the real key upstream only
    assert upstream_auth and set(upstream_auth) == {f"Bearer {KEY}"}
    (session,) = (tmp_path / "log").iterdir()
    scripts = [p for p in (tmp_path / "ws").rglob("script_env.json")]
    assert scripts, "the generated script ran"
    for path in scripts:
        seen = json.loads(path.read_text())
        assert seen["OPENAI_API_KEY"].startswith("ftgw-") and seen["OPENAI_API_BASE"].startswith("http://127.0.0.1:")
        assert upstream_url not in json.dumps(seen)
    assert all(p.read_text() == "a rephrased row" for p in (tmp_path / "ws").rglob("llm_reply.txt"))
    records = [json.loads(p.read_text()) for p in (session / "llm").glob("*.json")]
    assert len(records) == len(upstream_auth) and {r["stage"] for r in records} == {"data_script"}
    assert all(r["prompt_tokens"] > 0 and r["latency_s"] > 0 for r in records)
    calls = [e for e in read_events(session / "events.jsonl") if e.type == "llm_call"]
    assert len(calls) == len(records)
    scanned = 0
    for root in (tmp_path / "log", tmp_path / "ws", tmp_path / "files"):
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink():
                data = path.read_bytes()
                scanned += 1
                for secret in (KEY, JUDGE_KEY):
                    assert secret.encode() not in data, f"{secret} leaked into {path}"
    assert scanned > 20
    for secret in (KEY, JUDGE_KEY):
        assert secret not in out + err
