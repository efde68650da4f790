"""The Streamlit app through AppTest (no browser, no server) on sessions from the real engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftagent.jobs.tasks import TaskSpec
from tests.helpers.make_sessions import LoopPlan, SessionPlan, make_job, make_session

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

APP = str(Path(__file__).resolve().parents[2] / "ftagent" / "ui" / "app.py")


def _run(log_dir: Path, monkeypatch, page: str | None = None) -> AppTest:
    monkeypatch.setenv("FTAGENT_UI_LOG_DIR", str(log_dir))
    at = AppTest.from_file(APP, default_timeout=60).run()
    if page:
        at.sidebar.radio[0].set_value(page).run()
    assert not at.exception, at.exception
    return at


def _metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


@pytest.fixture
def job_dir(tmp_path):
    return make_job(tmp_path / "log", "j1", [
        (TaskSpec(model="builtin/tiny-qwen2", benchmark="demo_add"), SessionPlan(), None),
        (TaskSpec(model="Qwen/Qwen2.5-7B-Instruct", benchmark="aime25"),
         SessionPlan(benchmark="aime25", loops=[LoopPlan(val=0.2, test=0.1)] * 2), 9),
    ])


def test_job_summary_grid_and_stats(job_dir, monkeypatch):
    at = _run(job_dir, monkeypatch)
    assert at.title[0].value == "ftagent runs"
    m = _metrics(at)
    assert (m["Tasks"], m["Running"], m["Finished"], m["Loops done"], m["Failures"], m["Improved"]) == (
        "2", "1", "1", "4", "1", "2")
    grid = at.dataframe[0].value
    assert grid.loc["demo_add_tiny-qwen2", "L0"] == "0.4 / 0.35"
    assert grid.loc["demo_add_tiny-qwen2", "L1"] == "X"
    assert grid.loc["demo_add_tiny-qwen2", "Best"] == "0.4 / 0.35"
    assert grid.loc["aime25_Qwen2.5-7B-Instruct", "L1"] == "R"
    assert grid.loc["aime25_Qwen2.5-7B-Instruct", "State"] == "running"


def test_jobs_root_offers_a_job_selector(job_dir, monkeypatch):
    at = _run(job_dir.parent, monkeypatch)
    assert at.sidebar.selectbox[0].options == ["j1"]
    assert _metrics(at)["Tasks"] == "2"


def test_single_task_page(job_dir, monkeypatch):
    at = _run(job_dir, monkeypatch, page="Single Task")
    m = _metrics(at)
    assert (m["Loops"], m["Baseline val"], m["Baseline test"], m["Best val"], m["Best test"], m["SOTA loop"]) == (
        "3", "0.1", "0.05", "0.4", "0.35", "0")
    assert (m["LLM calls"], m["Tokens"], m["Cost (USD)"]) == ("3", "3603", "0.0375")
    charts = at.get("vega_lite_chart")
    assert len(charts) == 3  # score by loop + loss curves of the two trained loops
    assert any("lora_rank: 8" in c.value for c in at.code)  # generated train.yaml shown from disk
    assert any("not on disk" in md.value for md in at.markdown)
    assert any("CUDA out of memory" in str(df.value.to_dict()) for df in at.dataframe)
    # the running task: its session has no session_end
    at.sidebar.selectbox[0].set_value("aime25_Qwen2.5-7B-Instruct").run()
    assert not at.exception
    assert _metrics(at)["Loops"] == "2" and "running" in at.caption[0].value


def test_empty_and_missing_dirs(tmp_path, monkeypatch):
    at = _run(tmp_path, monkeypatch)
    assert "holds no sessions yet" in at.info[0].value
    at.sidebar.text_input[0].input(str(tmp_path / "nope")).run()
    assert not at.exception and "No such directory" in at.warning[0].value


def test_half_written_session(tmp_path, monkeypatch):
    sdir = make_session(tmp_path / "log", running_after_steps=3)
    with open(sdir / "events.jsonl", "a") as fh:
        fh.write('{"ts": 1, "loop": 0, "type": "valid')
    at = _run(sdir, monkeypatch, page="Single Task")
    assert any("incomplete" in w.value for w in at.warning)
    assert _metrics(at)["Loops"] == "1"


def test_session_with_no_events_and_no_snapshots(tmp_path, monkeypatch):
    sdir = tmp_path / "log" / "2026-01-01_00-00-00_abcdef"
    (sdir / "__session__").mkdir(parents=True)
    (sdir / "events.jsonl").write_text("")
    at = _run(tmp_path / "log", monkeypatch, page="Single Task")
    assert "not written any events" in at.info[0].value
    at = _run(tmp_path / "log", monkeypatch)
    assert _metrics(at)["Tasks"] == "1"
