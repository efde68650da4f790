"""End to end: real LLaMA-Factory + OpenCompass on CPU, tiny model, demo_add: the offline heuristic
planner for 3 loops, the best validation score beats the baseline, and the test split never reaches
generated code. (The LLM planner's one-loop session is the production rehearsal's,
tests/integration/test_production_rehearsal.py.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftagent.benchmarks.base import read_jsonl
from ftagent.engine.events import read_events
from ftagent.finetune.app import FinetuneOptions, run_finetune

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


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


def test_heuristic_demo_beats_the_baseline(workdir, monkeypatch):
    monkeypatch.setenv("FT_BENCHMARK_LIMIT", "30")
    monkeypatch.setenv("FT_STOP_AT_MAXIMUM", "false")  # three loops judged, even after a 100 % best
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
    # issue 31: per-item scores of real OpenCompass output pair by item id into intervals on every loop
    feedback = [e for e in read_events(session / "events.jsonl") if e.type == "feedback" and e.score is not None]
    vs_base = [d for e in feedback for d in e.intervals if d.split == "validation" and d.against == "baseline"]
    assert len(vs_base) == len(feedback) == 3 and all(d.has_interval and d.items == 30 for d in vs_base), vs_base
    assert all(e.rule == "interval" and e.verdict for e in feedback)
    assert "Differences: candidate" in (session / "report.md").read_text(encoding="utf-8")
    # issue 39 item 5: one run per evaluation, split by item id: the selection part (21 of the 30 validation
    # items, never shown) decides with its interval; both parts are reported
    chosen = [d for e in feedback for d in e.intervals if d.split == "selection" and d.against == "baseline"]
    assert len(chosen) == 3 and all(d.has_interval and d.items == 21 for d in chosen), chosen
    assert all(set(e.parts) == {"selection", "feedback"} and e.parts["feedback"].count == 9 for e in feedback)
    assert all(e.verdict.startswith("Selection part (21 validation items") for e in feedback), feedback[0].verdict
    assert "selection " in (session / "report.md").read_text(encoding="utf-8")
    assert all(set(r["parts"]) == {"selection", "feedback"} for r in report["loops"])
    # issue 31 item 5: the integrity guard ran on every candidate and flagged none of these honest loops
    integrity = [e for e in read_events(session / "events.jsonl") if e.type == "integrity"]
    assert len(integrity) == len(feedback) and all(e.flags == 0 for e in integrity), [
        c for e in integrity for c in e.checks if c.passed is False]
    ran = {c.name for e in integrity for c in e.checks if c.passed}
    assert ran == {"tokenizer", "chat_template", "architecture", "decoding", "weights", "benchmark_files",
                   "eval_config", "data_script", "contamination", "constant_answers"}, ran
    questions = _test_questions(workdir)
    generated = [p.read_text(encoding="utf-8") for p in (workdir / "ws").rglob("*") if p.suffix in {".py", ".yaml"}]
    _assert_no_test_text(generated, questions)
    # issue 31 item 3: the final evaluation (FT_FINAL_EVAL=full, the default; the one session that checks it): under
    # FT_BENCHMARK_LIMIT the final set is the test split, so the recorded test results are reused (nothing runs)
    final = json.loads((session / "final_eval.json").read_text())
    assert final["mode"] == "full" and final["split"] == "test" and final["items"] == 30 and final["note"], final
    assert final["best_loop"] == report["best_loop"] and final["best_score"] == report["best_test"]
    assert final["base_score"] == report["baseline_test"] and final["difference"]["items"] == 30
    assert "final: test (30 items)" in (session / "report.md").read_text(encoding="utf-8")
    # issue 31 item 4: `ftagent eval` scores the best model and the base with the numbers the session recorded
    res = subprocess.run([sys.executable, "-m", "ftagent", "eval", "--model", str(session), "--against",
                          "builtin/tiny-qwen2", "--split", "validation", "--json", "--out", str(workdir / "eval.json")],
                         cwd=workdir, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                         timeout=900)
    assert res.returncode == 0, res.stderr[-2000:]
    scored = json.loads(res.stdout)
    assert scored["benchmark"] == "demo_add" and scored["model"]["items"] == scored["against"]["items"] == 30
    assert scored["model"]["score"] == pytest.approx(report["best_val"], abs=0.01), scored  # report.json: 2 decimals
    assert scored["against"]["score"] == pytest.approx(report["baseline_val"], abs=0.01), scored
    assert scored["difference"]["items"] == 30 and scored["model"]["low"] <= scored["model"]["score"]
    print(json.dumps({"baseline": report["baseline_val"], "forecast": report["forecast"],
                      "loops": [(r["loop"], r["val_score"], r["test_score"]) for r in report["loops"]]}))
