"""Session report (``report.md`` + ``report.json``), built only from events and the latest snapshot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ftagent.engine.events import read_events
from ftagent.engine.session import list_snapshots


class LoopRow(BaseModel):
    loop: int
    hypothesis: str = ""
    planner: str = ""
    config: dict[str, Any] = Field(default_factory=dict)
    val_score: float | None = None
    test_score: float | None = None
    decision: bool | None = None
    status: str = "running"
    failure: str | None = None
    duration_s: float = 0.0


class Report(BaseModel):
    session: str
    benchmark: str | None = None
    base_model: str | None = None
    core_metric: str = "score"
    planner: str | None = None
    status: str = "running"
    baseline_val: float | None = None
    baseline_test: float | None = None
    loops: list[LoopRow] = Field(default_factory=list)
    best_loop: int | None = None
    best_val: float | None = None
    best_test: float | None = None
    best_model_path: str | None = None
    llm_calls: int = 0
    llm_tokens: int = 0
    llm_cost_usd: float = 0.0
    subprocess_time_s: float = 0.0
    training_time_s: float = 0.0
    evaluation_time_s: float = 0.0
    wall_time_s: float = 0.0


_KEY_CONFIG = ("finetuning_type", "learning_rate", "max_steps", "num_train_epochs",
               "per_device_train_batch_size", "lora_rank", "cutoff_len")


def build_report(session_dir: Path) -> Report:
    """Collect the report of a session directory."""
    report = Report(session=session_dir.name)
    loops: dict[int, LoopRow] = {}
    first_ts = last_ts = None
    for ev in read_events(session_dir / "events.jsonl"):
        first_ts = first_ts or ev.ts
        last_ts = ev.ts
        row = loops.setdefault(ev.loop, LoopRow(loop=ev.loop)) if ev.loop is not None else None
        if ev.type == "session_start":
            report.benchmark, report.base_model, report.planner = ev.benchmark, ev.base_model, ev.planner
        elif ev.type == "session_end":
            report.status = ev.status
        elif ev.type == "hypothesis" and row:
            row.hypothesis, row.planner = ev.hypothesis, ev.planner
        elif ev.type == "training" and row:
            row.config = {k: ev.config[k] for k in _KEY_CONFIG if k in ev.config}
        elif ev.type == "benchmark_result":
            report.core_metric = ev.core_metric
            if ev.baseline:
                setattr(report, "baseline_val" if ev.split == "validation" else "baseline_test", ev.score)
            elif row:
                setattr(row, "val_score" if ev.split == "validation" else "test_score", ev.score)
        elif ev.type == "feedback" and row:
            row.decision = ev.decision
        elif ev.type == "loop_end" and row:
            row.status, row.duration_s = ev.status, ev.duration_s
        elif ev.type == "step_end" and row and ev.failure is not None and ev.status == "failed":
            row.failure = ev.failure.summary()
        elif ev.type == "llm_call":
            report.llm_calls += 1
            report.llm_tokens += ev.prompt_tokens + ev.completion_tokens
            report.llm_cost_usd += ev.cost_usd
        elif ev.type == "run":
            report.subprocess_time_s += ev.duration_s
            if ev.purpose.startswith("train"):
                report.training_time_s += ev.duration_s
            elif ev.purpose.startswith("eval"):
                report.evaluation_time_s += ev.duration_s
    report.loops = [loops[k] for k in sorted(loops)]
    report.wall_time_s = (last_ts - first_ts) if first_ts and last_ts else 0.0
    _fill_best(report, session_dir)
    return report


def _fill_best(report: Report, session_dir: Path) -> None:
    snaps = list_snapshots(session_dir)
    if not snaps:
        return
    state = json.loads(snaps[-1].read_text(encoding="utf-8"))
    trace = state.get("trace", {})
    sota = trace.get("sota_loop")
    report.baseline_val = report.baseline_val if report.baseline_val is not None else trace.get("baseline_val")
    report.baseline_test = report.baseline_test if report.baseline_test is not None else trace.get("baseline_test")
    for exp in trace.get("experiments", []):
        if exp["loop"] == sota:
            report.best_loop, report.best_val, report.best_test = sota, exp.get("val_score"), exp.get("test_score")
            report.best_model_path = exp.get("artefacts", {}).get("model")


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def render_markdown(r: Report) -> str:
    """The human-readable report."""
    lines = [
        f"# ftagent report — {r.session}", "",
        f"- benchmark: `{r.benchmark}` ({r.core_metric}), base model: `{r.base_model}`, planner: {r.planner}",
        f"- status: {r.status}; wall time {r.wall_time_s:.0f}s "
        f"(training {r.training_time_s:.0f}s, evaluation {r.evaluation_time_s:.0f}s, "
        f"all subprocesses {r.subprocess_time_s:.0f}s)",
        f"- LLM: {r.llm_calls} calls, {r.llm_tokens} tokens, ${r.llm_cost_usd:.4f}", "",
        "| | validation | test |", "|---|---|---|",
        f"| baseline | {_fmt(r.baseline_val)} | {_fmt(r.baseline_test)} |",
        f"| best (loop {r.best_loop}) | {_fmt(r.best_val)} | {_fmt(r.best_test)} |", "",
        f"Best model: `{r.best_model_path}`" if r.best_model_path else "No loop beat the baseline.", "",
        "| loop | hypothesis | key config | val | test | decision | status | duration |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in r.loops:
        cfg = ", ".join(f"{k}={v}" for k, v in row.config.items())
        decision = {True: "new SOTA", False: "no", None: "–"}[row.decision]
        status = row.status if not row.failure else f"{row.status}: {row.failure[:80]}"
        lines.append(f"| {row.loop} | {row.hypothesis[:90]} | {cfg} | {_fmt(row.val_score)} | "
                     f"{_fmt(row.test_score)} | {decision} | {status} | {row.duration_s:.0f}s |")
    return "\n".join(lines) + "\n"


def write_report(session_dir: Path) -> tuple[Path, Path]:
    """Write ``report.md`` and ``report.json`` into the session directory; return their paths."""
    report = build_report(session_dir)
    md, js = session_dir / "report.md", session_dir / "report.json"
    md.write_text(render_markdown(report), encoding="utf-8")
    js.write_text(report.model_dump_json(indent=2), encoding="utf-8")
    return md, js
