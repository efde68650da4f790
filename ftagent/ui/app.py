"""The ftagent Streamlit UI: ``streamlit run ftagent/ui/app.py -- --log-dir <dir>`` (or ``ftagent ui``).

It reads only ``events.jsonl`` and the JSON snapshots (through :mod:`ftagent.views.session`); it never
imports the agent. The log directory comes from ``--log-dir``, else ``FTAGENT_UI_LOG_DIR``, else ``log``,
and can be changed in the sidebar.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pandas as pd
import streamlit as st

from ftagent.ui import frames as F
from ftagent.ui.decisions import decision_mark, show_baselines, show_decisions, show_loop_decision
from ftagent.ui.llm_calls import show_llm_calls
from ftagent.views.console import short_duration
from ftagent.views.job import JobView, load_job
from ftagent.views.layout import detect_layout, signature
from ftagent.views.report import LoopRow, build_report, export_command, llm_cost_text
from ftagent.views.session_view import LoopView, SessionView

CSS = {"green": "background-color: #c8f7c5", "red": "background-color: #f9c6c6",
       "blue": "background-color: #cfe3ff", "": ""}
MAX_FILE_CHARS = 20000


def default_log_dir() -> str:
    """``--log-dir`` after ``--`` on the streamlit command line, else the env var, else ``log``."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--log-dir")
    args, _ = parser.parse_known_args(sys.argv[1:])
    return args.log_dir or os.environ.get("FTAGENT_UI_LOG_DIR") or "log"


def sidebar() -> tuple[Path, str, bool, int]:
    st.sidebar.header("ftagent")
    log_dir = Path(st.sidebar.text_input("Log directory", default_log_dir()).strip() or ".")
    pages = ["Job Summary", "Single Task"]
    wanted = 1 if st.query_params.get("page", "").lower() in ("single", "task", "single task") else 0
    page = st.sidebar.radio("Page", pages, index=wanted)
    auto = st.sidebar.toggle("Auto-refresh while running", value=True)
    every = st.sidebar.number_input("Refresh every (s)", min_value=2, max_value=300, value=10)
    return log_dir, page, auto, int(every)


def pick_job(log_dir: Path) -> Path | None:
    """Resolve the log dir to something loadable; show a message and return None otherwise."""
    layout = detect_layout(log_dir)
    if layout.kind == "missing":
        st.warning(f"No such directory: `{log_dir}`. Point the sidebar at a session, a folder of "
                   "sessions or a job folder (default `./log`).")
        return None
    if layout.kind == "empty":
        st.info(f"`{log_dir}` holds no sessions yet. Start one with `ftagent llm_finetune ...` or "
                "`job/run_ft_job.sh tasks.json`, then come back: this page refreshes itself.")
        return None
    if layout.kind == "jobs":
        names = [Path(c).name for c in layout.children]
        return Path(layout.children[names.index(st.sidebar.selectbox("Job", names))])
    return log_dir


def styled_grid(job: JobView):
    rows, colours = F.summary_rows(job)
    df = pd.DataFrame(rows).set_index("Task")
    css = pd.DataFrame([{k: CSS[v] for k, v in c.items()} for c in colours], index=df.index)
    css = css.reindex(columns=df.columns, fill_value="").fillna("")
    return df.style.apply(lambda _: css, axis=None)


def job_summary(job: JobView) -> None:
    st.subheader(f"Job summary · `{job.dir}`")
    stats = F.job_stats(job)
    cols = st.columns(len(stats))
    for col, (label, value) in zip(cols, stats.items(), strict=True):
        col.metric(label.capitalize(), value)
    if not job.tasks:
        st.info("This job has no tasks yet.")
        return
    st.dataframe(styled_grid(job), width="stretch")
    st.caption("Cells: validation / test core score. Green = new SOTA, red = failed or rejected, "
               "blue = running or undecided; X = failed without scores, R = running, - = not reached.")
    for task in job.tasks:
        for w in (task.latest.warnings if task.latest else []):
            st.warning(f"{task.name}: {w}")


def session_header(s: SessionView, spec: dict | None = None) -> None:
    state = "running" if s.running else f"ended: {(s.end or {}).get('status')}"
    st.subheader(f"{s.benchmark or '?'} · {s.base_model or '?'}")
    st.caption(f"session `{s.session_id}` · {state}")
    with st.expander("Task", expanded=True):
        st.table(pd.DataFrame(F.task_rows(s, spec)), hide_index=True, hide_header=True)
    cols = st.columns(6)
    cols[0].metric("Loops", len(s.loops))
    cols[1].metric("Baseline val", F.fmt_score(s.baseline.get("validation")))
    cols[2].metric("Baseline test", F.fmt_score(s.baseline.get("test")))
    cols[3].metric("Best val", F.fmt_score(s.best("validation")))
    cols[4].metric("Best test", F.fmt_score(s.best("test")))
    cols[5].metric("SOTA loop", "baseline" if s.sota_loop is None else str(s.sota_loop))
    for w in s.warnings:
        st.warning(w)
    if s.end and s.end.get("message"):
        st.caption(f"Session end: {s.end['message']}")
    show_export(s)


def show_export(s: SessionView) -> None:
    """The command that takes the best model home (the report's :func:`export_command`), once a loop beat the baseline."""
    if s.sota_loop is None:
        return
    st.markdown(f"**Take the best model home** (loop {s.sota_loop}: Hugging Face folder, model card, "
                "`reproduce/`)" + (f" · model `{s.sota_model}`" if s.sota_model else ""))
    st.code(export_command(s.dir), language="bash")


def show_step_times(s: SessionView) -> None:
    """Wall time per loop and step; forecast rows next to them once sessions record a forecast."""
    forecast = F.session_forecast(s)
    frame = F.step_times_frame(s, forecast)
    if frame.empty:
        return
    st.markdown("**Wall time per step**" + (" (forecast vs actual)" if forecast else ""))
    st.dataframe(frame, width="stretch", hide_index=True)
    if forecast is None:
        st.caption("No forecast in this session's events: actual wall times only.")
    if s.reforecast:  # issue 43: re-forecast after every step from this session's step times and the load
        from ftagent.core.reforecast_arithmetic import Reforecast
        from ftagent.views.forecast_text import reforecast_line

        st.caption("Latest " + reforecast_line(Reforecast.model_validate(s.reforecast)))


def show_task(text: str) -> None:
    """The hypothesis' task: its text, and a JSON object in it (a recipe) as a key/value table."""
    rest, rows = F.split_task_text(text)
    if rest:
        st.markdown(f"**Task**: {rest}")
    if rows:
        if not rest:
            st.markdown("**Task**")
        st.table(pd.DataFrame(rows), hide_index=True)


def show_files(lp: LoopView) -> None:
    """Files of the last code round (earlier rounds are listed; the files on disk are the latest)."""
    if not lp.code_rounds:
        return
    last = lp.code_rounds[-1]
    st.markdown(f"**Generated files** (round {last['round']} of {len({r['round'] for r in lp.code_rounds})}, "
                f"{'accepted' if last.get('accepted') else 'not accepted'})")
    for name, path in last.get("files", {}).items():
        p = Path(path)
        if not p.is_file():
            st.markdown(f"- {name}: `{path}` (not on disk)")
            continue
        st.markdown(f"- {name}: `{path}`")
        lang = {".yaml": "yaml", ".yml": "yaml", ".py": "python", ".json": "json"}.get(p.suffix)
        st.code(p.read_text(encoding="utf-8", errors="replace")[:MAX_FILE_CHARS], language=lang)


def show_result(title: str, result: dict | None) -> None:
    if not result:
        return
    st.markdown(f"**{title}**: {result.get('core_metric')} = {F.fmt_score(result.get('score'))}"
                + (" (cached)" if result.get("cached") else ""))
    frame = F.metrics_frame(result)
    if not frame.empty:
        st.dataframe(frame, width="stretch", hide_index=True)
    if result.get("error_samples"):
        st.caption(f"{len(result['error_samples'])} error sample(s)")
        st.dataframe(pd.DataFrame(result["error_samples"]).astype(str), width="stretch", hide_index=True)


def loop_title(lp: LoopView, row: LoopRow | None = None) -> str:
    mark = decision_mark(row) if row is not None else {True: "· new best", False: "· not best",
                                                       None: "· pending"}[lp.decision]
    slot = f" · {lp.slot}" if lp.slot else ""
    return (f"Loop {lp.index}{slot} · {lp.stage} · {lp.status} · val {F.fmt_score(lp.val_score)} · "
            f"test {F.fmt_score(lp.test_score)} {mark}")


def show_loop(lp: LoopView, session_dir: Path | None = None, row: LoopRow | None = None) -> None:
    steps = F.steps_frame(lp)
    if not steps.empty:
        st.dataframe(steps, width="stretch", hide_index=True)
    if lp.hypothesis:
        h = lp.hypothesis
        st.markdown(f"**Hypothesis**: {h.get('hypothesis', '')}")
        st.markdown(F.stage_text(lp))  # issue 40: the stage, its start weights and their sampling
        if h.get("reason"):
            st.markdown(f"**Reason**: {h['reason']}")
        if h.get("task"):
            show_task(h["task"])
    show_files(lp)
    for v in lp.validations:
        st.markdown(f"**Validation**: {'passed' if v.get('passed') else 'failed'}")
        st.json({k: v.get(k) for k in ("data_stats", "dropped_keys", "injected_keys", "failure")}, expanded=False)
    if lp.training:
        st.markdown(f"**Training** ({lp.training.get('finetuning_type') or '?'}), output `{lp.training['output_dir']}`")
        loss = F.loss_frame(lp)
        if not loss.empty:
            st.vega_lite_chart(loss.reset_index(), F.line_spec(loss.index.name or "index", "loss"),
                               width="stretch")
    for run in lp.runs:
        st.caption(f"run `{run['purpose']}`: exit {run['exit_code']} in {short_duration(run['duration_s'])}"
                   + (" (timed out)" if run.get("timed_out") else ""))
    show_result("Validation", lp.results.get("validation"))
    show_result("Test (report only)", lp.results.get("test"))
    if lp.feedback:
        fb = lp.feedback
        st.markdown(f"**Feedback**: {'new SOTA' if fb.get('decision') else 'not accepted'}"
                    + (f" · error type {fb['error_type']}" if fb.get("error_type") else ""))
        st.markdown(f"{fb.get('reason', '')}  \n**Next**: {fb.get('next_step', '')}")
        lines = F.interval_lines(lp)
        if lines:  # paired bootstrap, 95 % (docs/benchmarks.md, Intervals)
            st.markdown("**Differences** (95 % paired bootstrap interval): " + "  \n".join(lines))
    if row is not None:
        show_loop_decision(row)  # the SOTA rule's verdict and the integrity guard's checks (the report's rows)
    if lp.llm_calls:
        show_llm_calls(lp.llm_calls, session_dir)  # each prompt and reply, tokens, cost, latency


def single_task(job: JobView) -> None:
    tasks = [t for t in job.tasks if t.sessions]
    if not tasks:
        st.info("No task has started a session yet.")
        return
    names = [t.name for t in tasks]
    task = tasks[names.index(st.sidebar.selectbox("Task", names))] if len(tasks) > 1 else tasks[0]
    ids = [s.session_id for s in task.sessions]
    s = task.sessions[ids.index(st.sidebar.selectbox("Session", ids, index=len(ids) - 1))]
    report = build_report(Path(s.dir), s)  # the report's view-model: this page and report.md read one source
    session_header(s, task.spec)
    show_baselines(report)
    if s.n_events == 0:
        st.info("This session has not written any events yet.")
        return
    scores = F.scores_frame(s)
    if not scores.empty:
        st.markdown("**Core score by loop**")
        long = scores.reset_index().melt(id_vars="loop", var_name="series", value_name="score").dropna()
        st.vega_lite_chart(long, F.line_spec("loop", "score", color="series"), width="stretch")
    show_decisions(report)
    if report.busy_text:
        st.caption(report.busy_text)
    if len(report.trial_tree) > 2 or any("[slot" in line for line in report.trial_tree):
        st.markdown("**Trials** (each under the loop it built on, with its slot)")
        st.code("\n".join(report.trial_tree), language=None)
    show_step_times(s)
    timeline = F.timeline_frame(s)
    if not timeline.empty:
        with st.expander("Step timeline", expanded=False):
            st.dataframe(timeline, width="stretch", hide_index=True)
    rows = {row.loop: row for row in report.loops}
    for lp in s.loops:
        with st.expander(loop_title(lp, rows.get(lp.index)), expanded=lp is s.loops[-1]):
            show_loop(lp, Path(s.dir), rows.get(lp.index))
    if s.llm_calls:
        calls = F.llm_frame(s.llm_calls)
        st.markdown("**LLM calls**")
        c = st.columns(3)
        c[0].metric("LLM calls", len(calls))
        c[1].metric("Tokens", int(calls["prompt_tokens"].fillna(0).sum() + calls["completion_tokens"].fillna(0).sum()))
        unpriced = int(calls["cost_usd"].isna().sum())
        cost = llm_cost_text(float(calls["cost_usd"].fillna(0).sum()), unpriced, len(calls))  # the report's words
        c[2].metric("Cost (USD)", "unknown" if unpriced == len(calls) else f"{calls['cost_usd'].fillna(0).sum():.4f}",
                    help=cost if unpriced else None)
        st.dataframe(calls, width="stretch", hide_index=True)


def auto_refresh(path: Path, sig: tuple, every: int) -> None:
    """Rerun the app when an events file changes (timer runs in the browser, not on the server)."""

    @st.fragment(run_every=every)
    def _watch() -> None:
        if signature(path) != sig:
            st.rerun(scope="app")

    _watch()


def main() -> None:
    st.set_page_config(page_title="ftagent", layout="wide")
    st.title("ftagent runs")
    log_dir, page, auto, every = sidebar()
    path = pick_job(log_dir)
    if path is None:
        return
    sig = signature(path)
    job = load_job(path)  # each session parsed once per change of its files (views' cache), not per rerun
    if page == "Job Summary":
        job_summary(job)
    else:
        single_task(job)
    running = any(t.state in ("running", "waiting") for t in job.tasks)
    if auto and running:
        st.sidebar.caption(f"live: checking for new events every {every}s")
        auto_refresh(path, sig, every)


main()
