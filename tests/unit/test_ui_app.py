"""The Streamlit app through AppTest (no browser, no server) on sessions from the real engine."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ftagent.jobs.tasks import TaskSpec
from ftagent.ui import frames as F
from ftagent.ui.launch import streamlit_command
from ftagent.views import session as D
from ftagent.views.console import short_duration
from ftagent.views.job import load_job
from ftagent.views.report import export_command
from tests.helpers.make_sessions import LoopPlan, SessionPlan, decisions_plan, make_job, make_session

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


# ---------------------------------------------------------------- issue #23 part 6: what a user takes home

DURATION = re.compile(r"^(-|\d+\.\d s|\d+ min( \d+ s)?|\d+ h( \d+ min)?)$")


def test_single_task_shows_task_table_export_and_readable_durations(job_dir, monkeypatch):
    at = _run(job_dir, monkeypatch, page="Single Task")
    task = dict(at.table[0].value.itertuples(index=False, name=None))
    assert (task["benchmark"], task["base model"], task["planner"], task["timeout"]) == (
        "demo_add", "builtin/tiny-qwen2", "scripted", "12h")
    assert task["state"] == "ended: completed" and not any("{" in v for v in task.values())
    codes = [c.value for c in at.code if "ftagent export " in c.value]
    session_dir = next(p for p in (job_dir / "demo_add_tiny-qwen2").iterdir() if p.is_dir())
    assert codes == [export_command(session_dir)] and codes[0].endswith(f"ftagent export {session_dir.absolute()}")
    frames = [df.value for df in at.dataframe]
    steps = next(f for f in frames if list(f.columns) == ["step", "status", "duration", "goto", "failure"])
    assert len(steps) and all(DURATION.match(d) for d in steps["duration"]), steps["duration"].tolist()
    times = next(f for f in frames if "total" in f.columns)
    assert list(times.columns[:3]) == ["loop", "row", "propose"] and set(times["row"]) == {"actual"}
    assert all(DURATION.match(v) for col in times.columns[2:] for v in times[col])
    assert any("No forecast" in c.value for c in at.caption)
    assert any(re.search(r"run `train`: exit 0 in 12\.5 s", c.value) for c in at.caption)
    llm = next(f for f in frames if "latency" in f.columns and "stage" in f.columns and "loop" in f.columns)
    assert llm["latency"].tolist() == ["1.5 s"] * 3


def test_no_export_command_before_a_loop_beats_the_baseline(tmp_path, monkeypatch):
    sdir = make_session(tmp_path / "log", running_after_steps=3)
    at = _run(sdir, monkeypatch, page="Single Task")
    assert not [c for c in at.code if "ftagent export " in c.value]
    assert "Take the best model home" not in " ".join(m.value for m in at.markdown)


def test_unpriced_llm_calls_show_cost_unknown_not_zero(tmp_path, monkeypatch):
    """A model LiteLLM has no price for: the metric says unknown, its help the report's words (llm_cost_text)."""
    sdir = make_session(tmp_path / "log", SessionPlan(llm_cost_usd=None, loops=[LoopPlan(val=0.4, test=0.3)]))
    at = _run(sdir, monkeypatch, page="Single Task")
    cost = next(m for m in at.metric if m.label == "Cost (USD)")
    assert cost.value == "unknown"
    assert "cost unknown (1 calls; the model has no price in LiteLLM's table)" in cost.proto.help


def test_single_task_shows_decisions_integrity_flags_and_constant_baseline(tmp_path, monkeypatch):
    """Each loop's score and interval vs the best, whether it became best and why, an integrity flag with
    its reason, and the constant answer beside the base model: the report's rows, drawn (issue 31)."""
    from ftagent.views.report import build_report, sota_rows

    sdir = make_session(tmp_path / "log", decisions_plan())
    at = _run(sdir, monkeypatch, page="Single Task")
    tables = [t.value for t in at.table]
    decisions = next(t for t in tables if "became best" in t.columns)
    assert decisions.reset_index().to_dict("records") == [r.cells() for r in sota_rows(build_report(sdir))]
    assert decisions["why"].tolist() == ["significant gain", "not significant", "integrity flag: benchmark_files"]
    baselines = next(t for t in tables if "a constant answer" in t.index)
    assert baselines.loc["a constant answer"].tolist() == ["0.25", "0.20"]
    assert baselines.loc["base model"].tolist() == ["0.10", "0.05"]
    assert any("always answering '42'" in c.value for c in at.caption)
    (flag,) = [w.value for w in at.warning if "integrity guard" in w.value]
    assert flag == ("Loop 2 flagged by the integrity guard, not eligible as best: benchmark_files: the "
                    "evaluator's files changed: ftagent/benchmarks/demo_add.py")
    titles = [e.label for e in at.expander if e.label.startswith("Loop ")]
    assert titles[1].endswith("· not best (not significant)") and titles[0].endswith("· new best (significant gain)")
    md = " ".join(m.value for m in at.markdown)
    assert "**Integrity guard**: 2 check(s), 1 flagged: not eligible as best" in md
    assert "not a significant gain" in md  # the rule's whole verdict line in the loop


def test_recipe_task_is_a_table():
    text = 'Train with {"learning_rate": 0.0002, "lora_rank": 8, "template": "qwen"}'
    rest, rows = F.split_task_text(text)
    assert rest == "Train with"
    assert rows == [{"key": "learning_rate", "value": "0.0002"}, {"key": "lora_rank", "value": "8"},
                    {"key": "template", "value": "qwen"}]
    assert F.split_task_text("Train on demo_add data") == ("Train on demo_add data", [])
    assert F.split_task_text("see {not json") == ("see {not json", [])


def test_step_times_with_a_forecast_adds_forecast_rows(tmp_path):
    s = D.load_session(make_session(tmp_path / "log"))
    assert F.session_forecast(s) is None  # no event type carries a forecast yet
    frame = F.step_times_frame(s, {0: {"train": 192.0, "evaluate": 11.14}})
    fc = frame[(frame["loop"] == 0) & (frame["row"] == "forecast")].iloc[0]
    assert (fc["train"], fc["evaluate"], fc["propose"], fc["total"]) == ("3 min 12 s", "11.1 s", "-", "3 min 23 s")
    assert len(frame[frame["row"] == "actual"]) == len(s.loops)


def test_short_duration_is_the_console_formatter():
    assert [short_duration(x) for x in (None, 11.1391, 59.94, 192, 5400)] == [
        "-", "11.1 s", "59.9 s", "3 min 12 s", "1 h 30 min"]


def test_launcher_hides_the_deploy_button(tmp_path):
    from streamlit import config

    cmd = streamlit_command(tmp_path)
    assert cmd[cmd.index("--client.toolbarMode") + 1] == "viewer"
    option = config._config_options_template["client.toolbarMode"]  # the installed streamlit knows it
    assert '"viewer"' in option.description


def test_server_entry_preloads_then_runs_streamlits_cli():
    import subprocess
    import sys

    import streamlit

    cmd = streamlit_command(Path("log"))
    assert cmd[1:4] == ["-m", "ftagent.ui.serve", "run"]
    out = subprocess.run([sys.executable, "-m", "ftagent.ui.serve", "version"], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert streamlit.__version__ in out


def test_session_view_is_parsed_once_per_change(tmp_path, monkeypatch):
    sdir = make_session(tmp_path / "log")
    calls = []
    real = D.load_session
    monkeypatch.setattr(D, "load_session", lambda p: calls.append(p) or real(p))
    first = D.load_session_cached(sdir)
    assert D.load_session_cached(sdir) is first and len(load_job(sdir).tasks) == 1 and len(calls) == 1
    with open(sdir / "events.jsonl", "a") as fh:
        fh.write("\n")  # size and mtime change: parsed again
    assert D.load_session_cached(sdir) is not first and len(calls) == 2


def test_the_latest_re_forecast_is_shown_under_the_step_times(tmp_path, monkeypatch):
    """Issue 43: the UI shows the last re-forecast (what is left, by part, the load, the first forecast's word)."""
    from ftagent.core.forecast_arithmetic import Forecast, LoopForecast
    from ftagent.core.reforecast_arithmetic import LoopLeft, Reforecast, StepTime
    from ftagent.engine.events import ForecastEvent, ReforecastEvent

    sdir = make_session(tmp_path / "log")
    first = Forecast(planner="heuristic", plan={}, loops=[LoopForecast(loop=i, train_s=60, eval_s=20, other_s=10)
                                                          for i in range(3)])
    latest = Reforecast(remaining_s=754.0, loops=[LoopLeft(loop=3, seconds=754.0)], slowness=2.5, forecast_slowness=1.5,
                        first_remaining_s=90.0)
    with open(sdir / "events.jsonl", "a", encoding="utf-8") as fh:
        fh.write(ForecastEvent(forecast=first, ts=2.0).model_dump_json() + "\n")
        fh.write(ReforecastEvent(loop=2, step_time=StepTime(loop=2, step="feedback", seconds=1.0),
                                 reforecast=latest).model_dump_json() + "\n")
    at = _run(sdir, monkeypatch, page="Single Task")
    assert any(c.value.startswith("Latest re-forecast: 12 min 34 s left (loop 3 12 min 34 s); CPU 2.5x as slow as "
                                  "idle (at the forecast 1.5x); the first forecast said 1 min 30 s")
               for c in at.caption), [c.value for c in at.caption]
