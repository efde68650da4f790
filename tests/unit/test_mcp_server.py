"""Issue 44: `ftagent mcp` without training — the tools through the SDK's own client (in process, and over HTTP
with the bearer token), their errors (the CLI's one-line messages), docs/agents.md's generated tool list, and
what happens to a run when the server dies (PR_SET_PDEATHSIG) or is detached. The real runs are in
tests/integration/test_mcp_server.py."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client
from typer.testing import CliRunner

from ftagent.cli.main import app
from ftagent.mcp_server.runs import RunManager
from ftagent.mcp_server.server import build_server
from tests.helpers.make_sessions import decisions_plan, make_session

RUN = "benchmark: demo_add\nbase_model: builtin/tiny-qwen2\nloop_n: 1\nplanner: heuristic\n"


@pytest.fixture
def log(tmp_path, monkeypatch) -> Path:
    for key in [k for k in os.environ if k.startswith(("FT_", "CHAT_", "OPENAI_"))]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("LOG_PATH", str(tmp_path / "log"))
    monkeypatch.setenv("FT_FILE_PATH", str(tmp_path / "files"))
    monkeypatch.chdir(tmp_path)
    return tmp_path / "log"


def _calls(*calls: tuple[str, dict]) -> list:
    """The results of the calls, made in order through the SDK's in-process client."""
    async def run() -> list:
        async with Client(build_server(RunManager())) as client:
            return [await client.call_tool(name, args) for name, args in calls]

    return anyio.run(run)


def _cli_error(*args: str) -> str:
    res = CliRunner().invoke(app, list(args))
    assert res.exception is not None, res.output
    return str(res.exception)


def test_docs_list_the_servers_tools():
    from ftagent.mcp_server import doc

    text = doc.DOC.read_text(encoding="utf-8")
    block = text.split(doc.START)[1].split(doc.END)[0].strip()
    assert block == doc.render(), "run `python -m ftagent.mcp_server.doc`"


def test_status_report_and_list_are_the_clis_objects(log):
    session = make_session(log, decisions_plan())
    status, report, sessions = _calls(("status", {"session": session.name}), ("report", {"session": str(session)}),
                                      ("list_sessions", {}))
    cli_status = json.loads(CliRunner().invoke(app, ["status", str(session), "--json"]).output)
    assert status.structured_content == cli_status  # one object, one projection
    assert report.structured_content == json.loads((session / "report.json").read_text())
    assert report.structured_content["best_intervals"][0]["low"] == 0.2
    assert [s["session_id"] for s in sessions.structured_content["sessions"]] == [session.name]


def test_resources_report_and_events(log):
    session = make_session(log, decisions_plan())

    async def read() -> tuple[str, str, list]:
        async with Client(build_server(RunManager())) as client:
            report = (await client.read_resource(f"ftagent://sessions/{session.name}/report")).contents[0].text
            events = (await client.read_resource(f"ftagent://sessions/{session.name}/events")).contents[0].text
            templates = (await client.list_resource_templates()).resource_templates
        return report, events, templates

    report, events, templates = anyio.run(read)
    assert report.startswith(f"# ftagent report — {session.name}")
    assert events == (session / "events.jsonl").read_text()
    assert {t.uri_template for t in templates} == {"ftagent://sessions/{session_id}/report",
                                                   "ftagent://sessions/{session_id}/events"}


def test_errors_are_the_clis_one_line_messages(log, tmp_path):
    session = make_session(log, decisions_plan())
    (tmp_path / "secret.yaml").write_text(RUN + "openai_api_key: sk-never\n")
    (tmp_path / "plan.yaml").write_text(RUN + "plan: true\n")
    results = _calls(("status", {"session": "nope"}), ("cancel", {"session": session.name}),
                     ("start", {"config": str(tmp_path / "secret.yaml")}),
                     ("start", {"config": str(tmp_path / "plan.yaml")}),
                     ("plan", {"config": str(tmp_path / "missing.yaml")}),
                     ("datasets", {"benchmark": "nope_bench"}),
                     ("eval", {"model": "builtin/tiny-qwen2", "split": "train"}),
                     ("start", {"loop_n": 0}), ("export", {"session": session.name}))
    assert all(r.is_error for r in results), [r.content[0].text for r in results if not r.is_error]
    text = [r.content[0].text for r in results]
    assert text[0] == _cli_error("status", "nope")  # word for word what the CLI prints after "error:"
    assert text[1] == f"session {session.name} is not running here (state: completed); nothing to cancel"
    assert text[2].startswith(f"run file {tmp_path / 'secret.yaml'}: 'openai_api_key' is a secret")
    assert "sk-never" not in text[2]
    assert text[3].endswith("'plan: true' only forecasts: use the plan tool")
    assert text[4] == _cli_error("plan", "--config", str(tmp_path / "missing.yaml"))
    assert text[5].startswith("unknown benchmark 'nope_bench'")
    assert "split" in text[6] and "loop_n" in text[7]  # refused by the input schema, before the tool runs
    assert text[8].count("\n") == 0 and "Traceback" not in text[8]  # the export's own check, one line
    assert sorted(p.name for p in log.iterdir()) == [session.name]  # the refused starts wrote nothing


def test_a_bad_run_ends_before_its_session_with_the_clis_error(log, tmp_path):
    """The run starts as a child; an unknown benchmark ends it (exit 2) and its one line is the tool's error."""
    (tmp_path / "run.yaml").write_text(RUN)
    (result,) = _calls(("start", {"config": str(tmp_path / "run.yaml"), "benchmark": "demo_ad", "wait_s": 120}))
    assert result.is_error and result.content[0].text.startswith("unknown benchmark 'demo_ad'. Did you mean 'demo_add'?")
    assert [p.name for p in log.iterdir()] == [".mcp"]  # only the run's console log: no session


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ftagent", "mcp", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def test_http_needs_the_bearer_token(log):
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    port = _free_port()
    env = {**os.environ, "FT_MCP_TOKEN": "tok-" + "x" * 20}
    proc = _serve(["--http", f"127.0.0.1:{port}"], env)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                refused = httpx2.post(url, json={}, timeout=2)
                break
            except httpx2.HTTPError:
                time.sleep(0.3)
        assert refused.status_code == 401  # no token: refused before any tool

        async def listed(token: str) -> set[str]:
            headers = {"Authorization": f"Bearer {token}"}
            async with httpx2.AsyncClient(headers=headers) as http, \
                    Client(streamable_http_client(url, http_client=http)) as client:
                return {t.name for t in (await client.list_tools()).tools}

        assert "start" in anyio.run(listed, env["FT_MCP_TOKEN"])
        assert httpx2.post(url, json={}, headers={"Authorization": "Bearer wrong"}, timeout=5).status_code == 401
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_public_bind_without_a_token_exits_2(log):
    env = {k: v for k, v in os.environ.items() if k != "FT_MCP_TOKEN"}
    proc = _serve(["--http", f"0.0.0.0:{_free_port()}"], env)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "listens beyond this machine: set FT_MCP_TOKEN" in out, out
    proc = _serve(["--http", "nohost:port"], env)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "expected HOST:PORT" in out, out


SERVER_DIES = """
import sys, time
import ftagent.mcp_server.runs as runs
runs.CHILD_COMMAND = [sys.executable]
child = ("import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: (open(sys.argv[1], 'w').write('TERM'), "
         "sys.exit(0))); open(sys.argv[1] + '.ready', 'w').close(); time.sleep(60)")
manager = runs.RunManager()
for name, detach in (("attached", False), ("detached", True)):
    manager.spawn(["-c", child, sys.argv[1] + "/" + name], sys.argv[1], detach)
print("ready", flush=True)
time.sleep(60)
"""


def test_a_run_dies_with_the_server_unless_detached(tmp_path):
    """The server SIGKILLed (no cleanup of its own runs): PR_SET_PDEATHSIG still ends an attached run with
    SIGTERM (as Ctrl-C); a detached run goes on."""
    server = subprocess.Popen([sys.executable, "-c", SERVER_DIES, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert server.stdout.readline().strip() == "ready"
    ready = [tmp_path / "attached.ready", tmp_path / "detached.ready"]
    deadline = time.monotonic() + 60  # both children installed their SIGTERM handler (a loaded machine starts them slowly)
    while time.monotonic() < deadline and not all(p.exists() for p in ready):
        time.sleep(0.1)
    assert all(p.exists() for p in ready)
    assert len(list((tmp_path / ".mcp").glob("*.log"))) == 2  # each run's console log
    server.send_signal(signal.SIGKILL)
    server.wait(timeout=10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (tmp_path / "attached").exists():
        time.sleep(0.1)
    assert (tmp_path / "attached").read_text() == "TERM"
    time.sleep(1.0)
    assert not (tmp_path / "detached").exists()
    import psutil

    detached = [p for p in psutil.process_iter(["cmdline"]) if str(tmp_path / "detached") in (p.info["cmdline"] or [])]
    assert len(detached) == 1  # still running after its server died
    detached[0].send_signal(signal.SIGTERM)
    detached[0].wait(timeout=10)
    assert (tmp_path / "detached").read_text() == "TERM"


def test_catalogue_tools_are_the_clis_json(log):
    benchmarks, datasets, models = _calls(("benchmarks", {}), ("datasets", {"benchmark": "demo_add"}), ("models", {}))
    cli = {name: json.loads(CliRunner().invoke(app, [*name.split(), "--json"]).output)
           for name in ("benchmarks list", "datasets list", "models list")}
    assert benchmarks.structured_content["benchmarks"] == cli["benchmarks list"]
    assert "demo_add" in {b["key"] for b in benchmarks.structured_content["benchmarks"]}
    assert [d["name"] for d in datasets.structured_content["datasets"]] == ["demo_add"]
    assert models.structured_content["models"] == cli["models list"]
