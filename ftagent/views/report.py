"""Session report (``report.md`` + ``report.json``): a rendering of :class:`~ftagent.views.session_view.SessionView`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ftagent.core.durations import format_duration
from ftagent.core.errors import EnvironmentFailure
from ftagent.core.final_record import FinalEvaluation, load_final
from ftagent.core.forgetting_rule import GuardResult
from ftagent.core.stats import Difference, interval_line
from ftagent.engine.events import ConstantAnswer
from ftagent.engine.session import write_atomic
from ftagent.views.commands import cli_command
from ftagent.views.forecast_text import VersusRow, versus, versus_markdown, versus_note
from ftagent.views.session import load_session
from ftagent.views.session_view import LoopView, SessionView
from ftagent.views.trials import Busy, busy_fraction, trial_tree


class LoopRow(BaseModel):
    loop: int
    hypothesis: str = ""
    planner: str = ""
    config: dict[str, Any] = Field(default_factory=dict)  # the key config, the stage first (issue 40)
    stage: str = "sft"
    weights_from: int | None = None  # the loop whose weights it started from (None: the base model)
    chain: list[str] = Field(default_factory=list)  # the stages that made its weights, this one last
    sampling: dict[str, Any] | None = None  # the start model on training prompts: samples, right, mixed prompts
    val_score: float | None = None
    test_score: float | None = None
    decision: bool | None = None
    verdict: str = ""  # the SOTA rule's line (ftagent.core.sota)
    rule: str | None = None  # what decided: interval | delta | failed | integrity | forgetting (None: older sessions)
    intervals: list[Difference] = Field(default_factory=list)  # paired 95 % intervals vs baseline / SOTA
    # validation's parts: {"selection": {"score", "items", "count"}, "feedback": ...} (issue 39 item 5)
    parts: dict[str, dict[str, Any]] = Field(default_factory=dict)
    status: str = "running"
    failure: str | None = None
    duration_s: float = 0.0
    contamination: list[dict[str, Any]] = Field(default_factory=list)  # each data set's scan: rows, flagged
    integrity: list[dict[str, Any]] | None = None  # the integrity guard's checks: name, passed, detail (None: not run)
    forgetting: list[GuardResult] | None = None  # the forgetting guard's verdicts (None: not run for this loop)


class Report(BaseModel):
    session: str
    session_dir: str | None = None
    benchmark: str | None = None
    base_model: str | None = None
    core_metric: str = "score"
    planner: str | None = None
    status: str = "running"
    end_message: str = ""  # the session_end's message, whole (a full disk's advice: what to free, how to resume)
    baseline_val: float | None = None
    baseline_test: float | None = None
    constant_baseline: dict[str, ConstantAnswer] = Field(default_factory=dict)  # split -> a constant answer's score
    loops: list[LoopRow] = Field(default_factory=list)
    best_loop: int | None = None
    best_val: float | None = None
    best_test: float | None = None
    best_intervals: list[Difference] = Field(default_factory=list)  # the best loop's, as recorded
    best_model_path: str | None = None
    llm_calls: int = 0
    llm_tokens: int = 0
    llm_cost_usd: float = 0.0  # of the calls whose price is known
    llm_unpriced_calls: int = 0  # calls whose model price is unknown (not counted as $0)
    subprocess_time_s: float = 0.0
    training_time_s: float = 0.0
    evaluation_time_s: float = 0.0
    wall_time_s: float = 0.0
    early_stops: int = 0  # full runs stopped because their loss diverged
    early_stop_saved_s: float = 0.0  # the training time those stops saved (estimated)
    forecast: list[VersusRow] = Field(default_factory=list)  # forecast vs actual per loop, then the total
    forecast_note: str = ""
    final: FinalEvaluation | None = None  # FT_FINAL_EVAL: base and best on the final item set (issue 31.3)
    sota_rule: str = ""  # which SOTA rule ran, in words (with its family-wise correction over K candidates)
    busy: Busy = Field(default_factory=Busy)  # seconds slots trained or evaluated ÷ (slots × trials' wall time)
    busy_text: str = ""
    trial_tree: list[str] = Field(default_factory=list)  # the loops as a tree, parent → children, with their slots


_KEY_CONFIG = ("finetuning_type", "learning_rate", "max_steps", "num_train_epochs",
               "per_device_train_batch_size", "lora_rank", "cutoff_len")


def build_report(session_dir: Path, view: SessionView | None = None) -> Report:
    """Collect the report of a session directory (through the one projection, :func:`load_session`;
    ``view``: that projection already loaded, e.g. the UI's cached one)."""
    view = view if view is not None else load_session(Path(session_dir))
    report = Report(session=Path(session_dir).name, session_dir=str(session_dir), benchmark=view.benchmark,
                    base_model=view.base_model, core_metric=view.core_metric or "score", planner=view.planner,
                    status=view.end["status"] if view.end else "running",
                    end_message=(view.end or {}).get("message") or "",
                    baseline_val=view.baseline.get("validation"), baseline_test=view.baseline.get("test"))
    report.constant_baseline = {split: ConstantAnswer.model_validate(ev["constant_baseline"])
                                for split, ev in view.baseline_results.items() if ev.get("constant_baseline")}
    report.loops = [_row(lp) for lp in view.loops]
    if view.sota_loop is not None:
        report.best_loop = view.sota_loop
        report.best_val, report.best_test = view.sota_scores()
        report.best_intervals = next((r.intervals for r in report.loops if r.loop == view.sota_loop), [])
        report.best_model_path = view.sota_model
    report.llm_calls = len(view.llm_calls)
    report.llm_tokens = sum(c.get("prompt_tokens", 0) + c.get("completion_tokens", 0) for c in view.llm_calls)
    report.llm_cost_usd = sum(c["cost_usd"] for c in view.llm_calls if c.get("cost_usd") is not None)
    report.llm_unpriced_calls = sum(1 for c in view.llm_calls if c.get("cost_usd") is None)
    for run in view.runs + [r for lp in view.loops for r in lp.runs]:
        report.subprocess_time_s += run["duration_s"]
        if run["purpose"].startswith("train"):
            report.training_time_s += run["duration_s"]
        elif run["purpose"].startswith("eval"):
            report.evaluation_time_s += run["duration_s"]
    report.wall_time_s = view.run_time_s  # the runs' time, not the gaps between a run and its resume
    stops = [t["early_stop"] for lp in view.loops if (t := lp.training or {}).get("early_stop")]
    report.early_stops = len(stops)
    report.early_stop_saved_s = sum(s.get("saved_s") or 0.0 for s in stops)
    report.forecast, report.forecast_note = versus(view), versus_note(view)
    report.final = load_final(session_dir)
    report.sota_rule = sota_rule_text(view)
    report.busy = busy_fraction(view)
    report.busy_text = report.busy.text(gpu=view.gpus > 0)
    report.trial_tree = trial_tree(view) if view.loops else []
    return report


def sota_rule_text(view: SessionView) -> str:
    """Which SOTA rule decided (``FT_SOTA_RULE``, :mod:`ftagent.core.sota`) and, with K candidates per round,
    its family-wise correction (Holm, :mod:`ftagent.core.sota_family`), from the settings and the judgments."""
    ft = (view.settings or {}).get("ft") or {}
    rule, delta = ft.get("sota_rule") or "interval", float(ft.get("sota_min_delta") or 0.0)
    sizes = [int(j.get("family_size") or 1) for lp in view.loops if (j := (lp.feedback or {}).get("judgment"))]
    k = max(sizes, default=1)
    if rule == "delta":
        return (f"delta: the validation score must beat the best by more than FT_SOTA_MIN_DELTA = {delta:g} "
                "(no error control" + (f"; {k} candidates per round raise the chance of a false winner)" if k > 1
                                       else ")"))
    bar = "0" if delta <= 0 else f"FT_SOTA_MIN_DELTA = {delta:g}"
    text = f"interval: the lower end of the 95 % paired bootstrap interval against the best must be above {bar}"
    if k > 1:
        text += (f"; Holm over rounds of {k} candidates judged against one best (a false winner in at most "
                 "2.5 % of rounds)")
    return text


def _row(lp: LoopView) -> LoopRow:
    config = (lp.training or {}).get("config") or {}
    failed = next((s for s in lp.steps if s.status == "failed" and s.failure), None)
    sampling = {k: lp.sampling.get(k) for k in ("prompts", "samples", "correct", "prompts_mixed", "temperature",
                                                 "source")} if lp.sampling else None
    return LoopRow(loop=lp.index, hypothesis=(lp.hypothesis or {}).get("hypothesis", ""),
                   planner=(lp.hypothesis or {}).get("planner", ""),
                   config={"stage": lp.stage, **{k: config[k] for k in _KEY_CONFIG if k in config and k != "stage"}},
                   stage=lp.stage, weights_from=(lp.hypothesis or {}).get("weights_from"),
                   chain=list((lp.training or {}).get("chain") or []), sampling=sampling,
                   val_score=lp.val_score, test_score=lp.test_score, decision=lp.decision,
                   verdict=(lp.feedback or {}).get("verdict") or "", rule=(lp.feedback or {}).get("rule"),
                   intervals=lp.intervals, parts=lp.parts,
                   status=lp.status, failure=failed.failure if failed else None,
                   duration_s=(lp.end or {}).get("duration_s", 0.0),
                   contamination=[{k: e.get(k) for k in ("dataset", "rows_checked", "items_checked", "flagged_rows",
                                                          "passed")} for e in lp.contamination],
                   integrity=list(lp.integrity.get("checks") or []) if lp.integrity else None,
                   forgetting=[GuardResult.model_validate(g) for g in lp.forgetting.get("results") or []]
                   if lp.forgetting else None)


def export_command(session_dir: str | Path) -> str:
    """The command that exports a session's best model (see ``ftagent export``), runnable from anywhere."""
    return f"{cli_command()} export {Path(session_dir).absolute()}"


def best_label(loop: int | None) -> str:
    """The best row's label: its loop, or that none beat the baseline (never ``loop None``)."""
    return "best (none beat the baseline)" if loop is None else f"best (loop {loop})"


def llm_cost_text(cost_usd: float, unpriced: int, calls: int) -> str:
    """The LLM spend in words, the one owner of this text (report, model card, UI): ``$0.0375``;
    ``$0.0375 (+ 2 calls of unknown price)``; or, when no call had a known price (a local
    OpenAI-compatible server), ``cost unknown (4 calls; ...)`` — never ``$0.0000`` for calls nobody priced."""
    if unpriced and unpriced >= calls:
        return f"cost unknown ({unpriced} calls; the model has no price in LiteLLM's table)"
    return f"${cost_usd:.4f}" + (f" (+ {unpriced} calls of unknown price)" if unpriced else "")


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def render_markdown(r: Report) -> str:
    """The human-readable report."""
    scans = [scan for row in r.loops for scan in row.contamination]
    lines = [
        f"# ftagent report — {r.session}", "",
        f"- benchmark: `{r.benchmark or '–'}` ({r.core_metric}), base model: `{r.base_model or '–'}`, "
        f"planner: {r.planner or '–'}",
        f"- status: {r.status}; wall time {format_duration(r.wall_time_s)} "
        f"(training {format_duration(r.training_time_s)}, evaluation {format_duration(r.evaluation_time_s)}, "
        f"all subprocesses {format_duration(r.subprocess_time_s)})",
        *([f"- ended: {r.end_message}"] if r.end_message and r.status != "completed" else []),
        *([f"- SOTA rule: {r.sota_rule}"] if r.sota_rule else []),
        *([f"- {r.busy_text}"] if r.busy_text else []),
        f"- LLM: {r.llm_calls} calls, {r.llm_tokens} tokens, "
        f"{llm_cost_text(r.llm_cost_usd, r.llm_unpriced_calls, r.llm_calls)}",
        *([f"- early stop: {r.early_stops} diverging run(s) stopped, ~{format_duration(r.early_stop_saved_s)} of training "
           "saved"] if r.early_stops else []),
        *([f"- contamination scans: {len(scans)} data set(s), "
           f"{sum(1 for s in scans if not s.get('passed'))} holding benchmark items"] if scans else []),
        *_integrity(r), *_forgetting(r), "",
        *_score_table(r), "",
        f"Best model: `{r.best_model_path}`" if r.best_model_path else "No loop beat the baseline.", "",
        *([f"Export it (Hugging Face folder, model card, reproduce/): `{export_command(r.session_dir)}`", ""]
          if r.best_model_path and r.session_dir else []),
        "| loop | hypothesis | key config | val | test | decision | status | duration |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in r.loops:
        cfg = ", ".join(f"{k}={v}" for k, v in row.config.items())
        decision = {True: "new SOTA", False: "no", None: "–"}[row.decision]
        why = sota_row(row).why
        decision += f" ({why})" if row.decision is not None and why else ""
        status = row.status if not row.failure else f"{row.status}: {row.failure[:80]}"
        lines.append(f"| {row.loop} | {row.hypothesis[:90]} | {cfg} | {_fmt(row.val_score)} | "
                     f"{_fmt(row.test_score)} | {decision} | {status} | {format_duration(row.duration_s)} |")
    if len(r.trial_tree) > 2 or any("[slot" in line for line in r.trial_tree):  # more than one loop, or slots
        lines += ["", "Trials (each under the loop it built on, with its slot):", "", "```", *r.trial_tree, "```"]
    lines += _differences(r)
    if r.forecast:
        lines += ["", *versus_markdown(r.forecast, r.forecast_note)]
    return "\n".join(lines) + "\n"


def _score_table(r: Report) -> list[str]:
    """Baseline and best on validation and test, and the final evaluation's column with its item count."""
    fin = r.final
    extra = (lambda text: f" {text} |") if fin is not None else (lambda _text: "")
    final_diff = f" ({fin.difference.text()} vs baseline)" if fin and fin.difference and r.best_loop is not None else ""
    lines = [f"| | validation | test |{extra(f'final: {fin.what()}' if fin else '')}",
             "|---|---|---|" + ("---|" if fin else ""),
             f"| baseline | {_fmt(r.baseline_val)} | {_fmt(r.baseline_test)} |{extra(_fmt(fin.base_score) if fin else '')}",
             *_constant_row(r, extra),
             f"| {best_label(r.best_loop)} | {_fmt(r.best_val)}{_vs_baseline(r.best_intervals, 'validation')} | "
             f"{_fmt(r.best_test)}{_vs_baseline(r.best_intervals, 'test')} |"
             f"{extra((_fmt(fin.best_score) + final_diff) if fin else '')}"]
    val = r.constant_baseline.get("validation")
    if val is not None and val.line:
        lines += ["", f"Trivial baseline: {val.line}; a score near it is no sign of skill."]
    if fin is not None and fin.note:
        lines += ["", f"Final evaluation (FT_FINAL_EVAL={fin.mode}): {fin.note}."]
    return lines


def _constant_row(r: Report, extra: Any) -> list[str]:
    """The row of what one constant answer scores on each split (issue 31 item 7); none when not recorded."""
    return [f"| {row['']} | {row['validation']} | {row['test']} |{extra('')}" for row in baseline_rows(r)[1:]]


def baseline_rows(r: Report) -> list[dict[str, str]]:
    """The base model's scores and, when recorded, a constant answer's, per split (report and UI):
    a base score near the constant one is no sign of skill (issue 31 item 7)."""
    rows = [{"": "base model", "validation": _fmt(r.baseline_val), "test": _fmt(r.baseline_test)}]
    if r.constant_baseline:
        rows.append({"": "a constant answer", **{split: _fmt(c.score) if (c := r.constant_baseline.get(split)) else "–"
                                                 for split in ("validation", "test")}})
    return rows


class SotaRow(BaseModel):
    """One loop's SOTA decision as the report and the UI show it: its validation score, its difference
    with the 95 % paired interval against the best it was judged against, whether it became the best
    and why (or why not): the rule's verdict (:func:`ftagent.core.sota.decide_sota`), an integrity flag
    or a forgetting-guard block. Read from the recorded events, never recomputed."""

    loop: int
    score: float | None = None  # validation core score
    versus: str = ""  # the incumbent it was judged against: "loop 0", "the baseline"
    difference: Difference | None = None  # validation, candidate − that incumbent
    became_best: bool | None = None  # None: not judged (yet)
    why: str = ""  # short: "significant gain", "not significant", "integrity flag: benchmark_files" ...
    verdict: str = ""  # the rule's whole line
    flags: list[str] = Field(default_factory=list)  # the integrity guard's flagged checks, "name: detail"

    def cells(self) -> dict[str, str]:
        """The row as table cells (the UI's decision table)."""
        best = {True: "yes", False: "no", None: "–"}[self.became_best]
        return {"loop": str(self.loop), "validation": _fmt(self.score),
                "vs best (95 % interval)": f"{self.difference.text()} vs {self.versus}" if self.difference else "–",
                "became best": best, "why": self.why}


def sota_row(row: LoopRow) -> SotaRow:
    """The decision view of one loop (see :class:`SotaRow`)."""
    vals = [d for d in row.intervals if d.split == "validation"]
    diff = next((d for d in vals if d.against == "SOTA"), None) or next((d for d in vals if d.against == "baseline"),
                                                                       None)
    flags = [f"{c.get('name')}: {c.get('detail')}" for c in row.integrity or [] if c.get("passed") is False]
    return SotaRow(loop=row.loop, score=row.val_score, versus=diff.reference if diff else "",
                   difference=diff, became_best=row.decision, why=_why(row, flags), verdict=row.verdict,
                   flags=flags)


def _why(row: LoopRow, flags: list[str]) -> str:
    if row.decision is None:
        return "not judged yet" if row.status == "running" else row.status
    if row.rule == "integrity" or (flags and not row.decision):
        return "integrity flag: " + ", ".join(f.split(":", 1)[0] for f in flags) if flags else "integrity flag"
    blocked = [g.benchmark for g in row.forgetting or [] if g.blocked]
    if row.rule == "forgetting" or (blocked and not row.decision):
        return "forgetting guard: " + ", ".join(blocked)
    if row.rule == "failed" or row.status == "failed":
        return "failed"
    if row.rule == "interval":
        return "significant gain" if row.decision else "not significant"
    fallback = " (no interval)" if "No interval" in row.verdict else ""
    if row.rule == "delta" and "nothing to beat" in row.verdict:
        return "nothing to beat yet"
    if row.rule == "delta":
        return ("gain above FT_SOTA_MIN_DELTA" if row.decision else "gain not above FT_SOTA_MIN_DELTA") + fallback
    return "beats the best" if row.decision else "does not beat the best"  # a session from before the rules


def sota_rows(r: Report) -> list[SotaRow]:
    """Every loop's decision view, in loop order."""
    return [sota_row(row) for row in r.loops]


def _integrity(r: Report) -> list[str]:
    """The integrity guard: how many candidates it checked, and each flag with its reason (issue 31.5)."""
    checked = [row for row in r.loops if row.integrity is not None]
    if not checked:
        return []
    flagged = [(row.loop, c) for row in checked for c in row.integrity or [] if c.get("passed") is False]
    lines = [f"- integrity guard: {len(checked)} candidate(s) checked, "
             f"{len({loop for loop, _ in flagged})} flagged (a flagged candidate cannot become SOTA)"]
    lines += [f"  - loop {loop} flagged by {c.get('name')}: {c.get('detail')}" for loop, c in flagged]
    return lines


def _forgetting(r: Report) -> list[str]:
    """The forgetting guard: every candidate it scored (those that would have become SOTA), each guard
    benchmark's difference against the base model, and which were kept from SOTA (issue 31.6)."""
    scored = [row for row in r.loops if row.forgetting is not None]
    if not scored:
        return []
    kept = [row.loop for row in scored if any(g.blocked for g in row.forgetting or [])]
    lines = [f"- forgetting guard: {len(scored)} candidate(s) scored against the base model, {len(kept)} kept from "
             "SOTA (a drop beyond FT_GUARD_MAX_DROP, docs/benchmarks.md, Forgetting guard)"]
    lines += [f"  - loop {row.loop}: {g.text}" for row in scored for g in row.forgetting or []]
    return lines


def _vs_baseline(intervals: list[Difference], split: str) -> str:
    d = next((x for x in intervals if x.split == split and x.against == "baseline"), None)
    return "" if d is None else f" ({d.text()} vs baseline)"


def _differences(r: Report) -> list[str]:
    """Each loop's differences with their paired bootstrap intervals, and the rule's verdict."""
    rows = [row for row in r.loops if row.intervals or row.verdict]
    if not rows:
        return []
    lines = ["", "Differences: candidate − baseline and candidate − SOTA (the SOTA when the loop was judged), "
             "95 % paired bootstrap intervals over the same items (docs/benchmarks.md, Intervals); "
             "\"no interval\" where the metric is not a mean over items. In a session that splits validation, "
             "the selection part (never shown to the planner) alone decides; the feedback part's items may be "
             "shown (docs/benchmarks.md, Feedback and selection).", ""]
    for row in rows:
        scores = [("validation", row.val_score), *((p, (row.parts.get(p) or {}).get("score"))
                                                   for p in ("selection", "feedback")), ("test", row.test_score)]
        parts = [interval_line(s, row.intervals, split) for split, s in scores if s is not None]
        lines.append(f"- loop {row.loop}: {'; '.join(parts)}" + (f" — {row.verdict}" if row.verdict else ""))
    return lines


def write_report(session_dir: Path) -> tuple[Path, Path]:
    """Write ``report.md`` and ``report.json`` into the session directory; return their paths.

    Each through a temp file and a rename: a full disk leaves the previous report (or none), never a
    0-byte one, and ends with one :class:`EnvironmentFailure` that says how to go on (issue 34.4).
    """
    report = build_report(session_dir)
    md, js = session_dir / "report.md", session_dir / "report.json"
    try:
        write_atomic(md, render_markdown(report))
        write_atomic(js, report.model_dump_json(indent=2))
    except OSError as exc:
        raise EnvironmentFailure(
            f"cannot write the report {exc.filename or md}: {exc.strerror or exc} (errno {exc.errno}). The "
            f"session itself is kept: free space under {session_dir.parent}, then `ftagent report {session_dir}` "
            f"writes the report, and `ftagent llm_finetune --path {session_dir}` resumes the session") from exc
    return md, js
