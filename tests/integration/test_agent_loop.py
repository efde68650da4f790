"""End to end: real LLaMA-Factory + OpenCompass on CPU, tiny model, demo_add.

(a) one loop driven by the LLM planner through a real HTTP server with scripted replies (data files);
(b) the offline heuristic planner for 3 loops: the best validation score beats the baseline.
Both check that the test split never reaches a prompt or generated code.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ftagent.benchmarks.base import read_jsonl
from ftagent.engine.events import read_events
from ftagent.engine.session import list_snapshots
from ftagent.finetune.app import FinetuneOptions, run_finetune
from tests.fakes.openai_server import FakeOpenAIServer, Reply

pytestmark = pytest.mark.integration
SCRIPTED = Path(__file__).resolve().parents[1] / "fixtures" / "llm" / "demo_add"
SECRET = "sk-test-SECRET-9f8e7d"


@pytest.fixture
def workdir(tmp_path, monkeypatch, tools_env):
    """An isolated FT_FILE_PATH / LOG_PATH / WORKSPACE_PATH with the shared tool env."""
    monkeypatch.chdir(tmp_path)
    for key in ("CHAT_MODEL", "OPENAI_API_KEY", "OPENAI_API_BASE", "FT_PLANNER", "CHAT_STREAM"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("FT_FILE_PATH", str(tmp_path / "files"))
    monkeypatch.setenv("LOG_PATH", str(tmp_path / "log"))
    monkeypatch.setenv("WORKSPACE_PATH", str(tmp_path / "ws"))
    monkeypatch.setenv("FT_TOOLS_ENV", str(tools_env))
    monkeypatch.setenv("FT_ENV_TYPE", "local")
    return tmp_path


def _session(root: Path) -> Path:
    (session,) = (root / "log").iterdir()
    return session


def _test_questions(root: Path) -> list[str]:
    rows = read_jsonl(root / "files" / "benchmarks" / "demo_add" / "test.jsonl")
    assert rows, "the test split must exist for the check to mean anything"
    return [r["question"] for r in rows]


def _assert_no_test_text(texts: list[str], questions: list[str]) -> None:
    blob = "\n".join(texts)
    leaked = [q for q in questions if q in blob]
    assert not leaked, f"test items leaked: {leaked[:3]}"


def _bwrap_or_skip() -> None:
    """The LLM planner's code runs only confined: without a usable bubblewrap this test cannot run."""
    from ftagent.runners.sandbox import probe_bwrap

    ok, why = probe_bwrap()
    if not ok:
        if os.environ.get("FTAGENT_REQUIRE_SANDBOX") == "1":
            pytest.fail(f"bubblewrap is required here (FTAGENT_REQUIRE_SANDBOX=1) but unusable: {why}")
        pytest.skip(f"bubblewrap unusable ({why}): `make system` or apt-get install bubblewrap")


def test_llm_planner_loop_through_scripted_server(workdir, monkeypatch):
    _bwrap_or_skip()
    replies = [
        Reply.from_file(SCRIPTED / "hypothesis.json"),
        Reply.from_file(SCRIPTED / "process_data.py", fence="python"),
        Reply.from_file(SCRIPTED / "train.yaml", fence="yaml"),
        Reply.from_file(SCRIPTED / "feedback.json"),
    ]
    with FakeOpenAIServer(replies) as server:
        monkeypatch.setenv("CHAT_MODEL", "openai/scripted")
        monkeypatch.setenv("OPENAI_API_BASE", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)
        monkeypatch.setenv("CHAT_STREAM", "false")
        monkeypatch.setenv("FT_BENCHMARK_LIMIT", "10")
        summary = run_finetune(FinetuneOptions(benchmark="demo_add", base_model="builtin/tiny-qwen2", loop_n=1))
        requests = server.chat_requests
        request_text = server.all_request_text()
        base_url = server.base_url
    assert summary.status == "completed" and summary.failures == []
    assert len(requests) == 4  # proposal, data script, config, feedback: nothing retried or repeated
    session = _session(workdir)
    events = list(read_events(session / "events.jsonl"))
    by_type = {e.type for e in events}
    assert {"hypothesis", "code_round", "validation", "training", "benchmark_result", "feedback"} <= by_type
    validation = next(e for e in events if e.type == "validation")
    assert any(k.startswith("this_key_does_not_exist") for k in validation.dropped_keys)
    purposes = {e.purpose for e in events if e.type == "run" and e.loop == 0}
    assert {"data_debug", "train_micro_batch", "data", "train", "eval"} <= purposes  # every subprocess recorded
    forecast = next(e for e in events if e.type == "forecast").forecast  # recorded after the baseline
    assert forecast.planner == "llm" and forecast.llm.calls > 0 and forecast.train_probe.s_per_step > 0
    assert "measured before the first run" in requests[0].raw  # the proposal prompt gets the estimate
    scores = {(e.split, e.baseline): e.score for e in events if e.type == "benchmark_result"}
    assert scores[("validation", False)] is not None and scores[("test", False)] is not None
    # the key reaches no log, record, snapshot nor the data script (it gets the session's LLM gateway)
    for path in [session / "events.jsonl", *session.glob("llm/*.json"), *list_snapshots(session)]:
        assert SECRET not in path.read_text(encoding="utf-8"), path
    questions = _test_questions(workdir)
    _assert_no_test_text([request_text], questions)
    seen = json.loads(next((workdir / "ws").rglob("seen.json")).read_text())
    env_text = json.dumps(seen["env"])
    assert "benchmarks" not in env_text
    _assert_no_test_text([env_text], questions)
    assert SECRET not in env_text and base_url not in env_text
    assert seen["env"]["OPENAI_API_KEY"].startswith("ftgw-") and seen["env"]["OPENAI_API_BASE"].startswith("http://127.0.0.1:")
    from ftagent.runners.sandbox import probe_bwrap

    if probe_bwrap()[0]:
        assert seen["benchmarks_visible"] is False  # the sandbox hides FT_FILE_PATH/benchmarks


def test_heuristic_demo_beats_the_baseline(workdir, monkeypatch):
    monkeypatch.setenv("FT_BENCHMARK_LIMIT", "30")
    monkeypatch.setenv("FT_UPPER_DATA_SIZE_LIMIT", "5000")
    summary = run_finetune(FinetuneOptions(benchmark="demo_add", base_model="builtin/tiny-qwen2", loop_n=3))
    assert summary.status == "completed" and summary.loops_done == 3
    session = _session(workdir)
    report = json.loads((session / "report.json").read_text())
    assert report["planner"] == "heuristic"
    assert report["baseline_val"] is not None and report["best_val"] is not None
    assert report["best_val"] > report["baseline_val"], report
    assert Path(report["best_model_path"]).is_dir()  # the best model is kept
    versus = {r["loop"]: r for r in report["forecast"]}  # forecast vs actual, per loop and in total
    assert set(versus) == {0, 1, 2, None}
    for row in versus.values():
        assert 0 < row["forecast_s"] < 1e5 and row["actual_s"] > 0 and row["error_pct"] is not None
    assert "## Forecast vs actual" in (session / "report.md").read_text(encoding="utf-8")
    questions = _test_questions(workdir)
    generated = [p.read_text(encoding="utf-8") for p in (workdir / "ws").rglob("*") if p.suffix in {".py", ".yaml"}]
    _assert_no_test_text(generated, questions)
    print(json.dumps({"baseline": report["baseline_val"], "forecast": report["forecast"],
                      "loops": [(r["loop"], r["val_score"], r["test_score"]) for r in report["loops"]]}))
