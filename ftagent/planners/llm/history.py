"""History that teaches: experiments as the planner reads them (never with test scores).

For each experiment the planner sees the hypothesis, the config that was actually trained (and every
change the system made to the planner's config), the data it trained on (rows produced), a loss
summary (first / last / min, trend) with a compact sampled table, the validation score against the
baseline, and for failures the error type and the decisive log lines. Everything here works on
:class:`~ftagent.planners.llm.propose.PlannerExperiment`, which has no field for test scores.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import BaseModel

from ftagent.core.untrusted import read_last

if TYPE_CHECKING:
    from ftagent.planners.llm.view import PlannerExperiment

# keys of the trained config the planner did not choose (paths, caching, reporting)
SYSTEM_KEYS = {"model_name_or_path", "output_dir", "dataset_dir", "dataset", "overwrite_cache", "save_only_model",
               "per_device_eval_batch_size", "report_to", "plot_loss", "overwrite_output_dir", "stage", "do_train"}
_DECISIVE = re.compile(r"(error|exception|traceback|out of memory|oom|killed|nan|inf\b|timed? ?out|"
                       r"not found|no such|invalid|must|cannot|failed|unexpected)", re.IGNORECASE)


_FRAME = re.compile(r'File "([^"]+)"')
INTERNAL_NOTE = ("an internal error of the system (not caused by the plan); retrying the same plan is reasonable")


_ABS_PATH = re.compile(r"(?<![\w.])/(?:[^/\s,'\"]+/)+([^/\s,'\"]+/[^/\s,'\"]+)")


def short_paths(text: str) -> str:
    """Absolute host paths cut to their last two parts (``…/demo_add/validation.jsonl``): no host paths in
    prompts (issue 35)."""
    return _ABS_PATH.sub(r"…/\1", text)


def integrity_lines(flags: list[str]) -> list[str]:
    """The integrity guard's flags in words: what each means, and whether the experiment caused it
    (:data:`ftagent.integrity.verdict.CHECK_KINDS`); empty without flags."""
    from ftagent.integrity.verdict import CHECK_KINDS, flag_parts

    if not flags:
        return []
    lines = ["- Integrity guard: this result is NOT eligible as best, whatever its score (a check flagged it):"]
    for flag in flags:
        name, detail = flag_parts(flag)
        kind = CHECK_KINDS.get(name)
        if kind is None:  # a check this ftagent does not describe: show what was recorded
            lines.append(f"  - `{name}`: {detail}")
            continue
        cause = ("caused by this experiment" if kind.by_experiment else "NOT caused by this experiment")
        lines.append(f"  - `{name}` ({cause}): {kind.meaning}. Recorded: {clip_text(short_paths(detail), 300)}. "
                     f"{kind.advice[0].upper()}{kind.advice[1:]}.")
    return lines


def is_internal_error(failure: Any) -> bool:
    """True for an UNKNOWN failure whose traceback ends inside ftagent itself (a system bug, not the plan's)."""
    if failure is None or getattr(failure.error_type, "value", failure.error_type) != "UNKNOWN":
        return False
    frames = _FRAME.findall(f"{failure.message}\n{failure.log_tail}")
    return bool(frames) and "/ftagent/" in frames[-1].replace("\\", "/") and not frames[-1].endswith("process_data.py")


def clip_text(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters, cut at a sentence end (else a word end), marked with "…"."""
    text = (text or "").strip()
    if len(text) <= limit:
        return text
    head = text[:limit]
    cut = max(head.rfind(". "), head.rfind(".\n"), head.rfind("! "), head.rfind("? "))
    if cut >= limit // 2:
        return head[:cut + 1] + " …"
    space = head.rfind(" ")
    return (head[:space] if space > 0 else head).rstrip(",;:") + " …"


def _train_summary(exp: Any) -> tuple[Any, Any] | None:
    """(``trainer_state.json``, its final ``train_runtime`` row) of the run, None when it did not train."""
    folder = (getattr(exp, "artefacts", {}) or {}).get("output_dir")
    if not folder:
        return None
    try:
        state = json.loads((Path(folder) / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    rows = [r for r in state.get("log_history", []) if isinstance(r, dict) and "train_runtime" in r]
    return (state, rows[-1]) if rows else None


def run_speed(exp: Any) -> tuple[float, int] | None:
    """(train_runtime seconds, optimizer steps) of the run's training, None when not recorded."""
    summary = _train_summary(exp)
    if summary is None:
        return None
    state, row = summary
    return float(row.get("train_runtime") or 0), int(state.get("global_step") or row.get("step") or 0)


def run_batch(exp: Any) -> int | None:
    """The run's effective batch on one device (per_device_train_batch_size × gradient_accumulation_steps of the
    config it trained), None when the config does not say."""
    config = getattr(exp, "config", None) or {}
    try:
        batch = int(config.get("per_device_train_batch_size") or 0)
        accumulation = int(config.get("gradient_accumulation_steps") or 1)
    except (TypeError, ValueError, AttributeError):
        return None
    return batch * accumulation if batch > 0 and accumulation > 0 else None


def run_rows_per_s(exp: Any) -> float | None:
    """The run's ``train_samples_per_second`` (rows per second of training), None when not recorded."""
    summary = _train_summary(exp)
    value = summary[1].get("train_samples_per_second") if summary is not None else None
    return float(value) if value else None


def throughput_line(exp: Any) -> str:
    """Measured training speed from the run's ``trainer_state.json`` (empty when it did not train)."""
    summary = _train_summary(exp)
    if summary is None:
        return ""
    state, row = summary
    runtime, steps = run_speed(exp) or (0.0, 0)
    parts = [f"{steps:,} optimizer steps in {_duration(runtime)}"]
    if steps and runtime:
        parts.append(f"{runtime / steps:.2f} s/step")
    if row.get("train_samples_per_second"):
        parts.append(f"{float(row['train_samples_per_second']):.1f} samples/s")
    if state.get("num_train_epochs") or row.get("epoch"):
        parts.append(f"{float(row.get('epoch') or state.get('num_train_epochs')):.3g} epoch(s)")
    return ", ".join(parts)


def _duration(seconds: float) -> str:
    from ftagent.core.durations import format_duration

    return format_duration(seconds) if seconds >= 60 else f"{seconds:.1f} s"


def data_script_output(exp: Any, lines: int = 20) -> str:
    """The last ``lines`` lines the data script printed: the full data run's log (``data_log``, in its own folder,
    :mod:`ftagent.core.approved`), else ``<workspace>/logs/process_data.log`` (a loop from before the freeze)."""
    artefacts = getattr(exp, "artefacts", {}) or {}
    log = artefacts.get("data_log") or (Path(artefacts["workspace"]) / "logs" / "process_data.log"
                                        if artefacts.get("workspace") else None)
    if not log:
        return ""
    try:  # the data script's own folder: never through a link, its last 1 MB
        text = read_last(Path(log).parent, Path(log).name, limit=1 << 20).decode("utf-8", errors="replace")
    except OSError:
        return ""
    kept = [line.rstrip()[:300] for line in text.splitlines() if line.strip()]
    return "\n".join(kept[-lines:])


class LossSummary(BaseModel):
    """A loss curve in a few numbers."""

    points: int
    first: float
    last: float
    min: float
    min_step: int
    last_step: int
    trend: str  # "falling", "flat", "rising", "noisy"
    eval_last: float | None = None
    flat_from_step: int | None = None  # "fell early, then flat from step S"

    def named_steps(self) -> set[int]:
        """The steps the summary names, which the sampled table must show (relay round r2: "min 0.0001 at step
        4500" beside a table whose rows were 4250 and 4750)."""
        return {self.min_step, self.last_step} | ({self.flat_from_step} if self.flat_from_step is not None else set())

    def line(self) -> str:
        text = (f"{self.points} points, first {self.first:.4g}, last {self.last:.4g} (step {self.last_step}), "
                f"min {self.min:.4g} at step {self.min_step}; {self.trend}")
        if self.eval_last is not None:
            text += f"; last eval_loss {self.eval_last:.4g}"
        return text


def _losses(history: list[dict[str, Any]]) -> list[tuple[int, float]]:
    out: list[tuple[int, float]] = []
    for p in history:
        if isinstance(p, dict) and isinstance(p.get("loss"), (int, float)):
            step = p.get("step")
            out.append((int(step) if step is not None else len(out) + 1, float(p["loss"])))
    return out


# transformers' Trainer logs the loss rounded to 4 decimals (trainer.py, _maybe_log_save_evaluate:
# ``logs["loss"] = round(tr_loss_scalar / (...), 4)``), so near zero a step of 0.0001 is rounding, not
# a trend: 0.0003 → 0.0002 is "a third less" by ratio. A change in loss counts only when it is also
# larger than LOSS_NOISE_FLOOR in absolute terms (relay round 4: a curve flat at 0.0002-0.0003 for the
# last 45 % of the run was called "still falling at the end; noisy").
LOSS_NOISE_FLOOR = 5e-4


def _still_falling(values: list[float]) -> bool:
    """True when the last fifth of the curve still loses a tenth of its loss, and more than the noise
    floor (LOSS_NOISE_FLOOR) in absolute terms.

    A cosine or linear schedule flattens the end of a converged run (0.0016 → 0.0015 → 0.0015): that
    is levelling off. A curve that goes 0.0226 → 0.0169 in its last fifth while the learning rate
    decays to 0 is still falling, however small that is against the first steps' drop.
    """
    last = values[-max(3, len(values) // 5):]
    drop = last[0] - last[-1]
    return last[-1] < last[0] * 0.9 and drop > LOSS_NOISE_FLOOR  # sheds a tenth of its loss, above rounding


def _plateau_start(values: list[float], band: float = 1.25, min_share: float = 0.5) -> int | None:
    """Index from which every loss stays within ``band`` × the final loss or LOSS_NOISE_FLOOR above it, when
    that plateau covers more than ``min_share`` of the run (a curve that stopped learning early); else None.

    The floor: near zero the 4-decimal rounding makes a ratio meaningless (relay round r1: 0.0006 at step
    1,400, then 0.0005 ... 0.0001 to step 7,000 was "falling, levelling off at the end", 80 % of a run that
    had learnt everything)."""
    if len(values) < 6 or values[-1] < 0:
        return None
    top = max(values[-1] * band, values[-1] + LOSS_NOISE_FLOOR)
    start = len(values) - 1
    while start > 0 and values[start - 1] <= top:
        start -= 1
    return start if (len(values) - start) / len(values) > min_share else None


def loss_summary(history: list[dict[str, Any]]) -> LossSummary | None:
    """First/last/min and the trend of the second half against the first; None without losses."""
    pts = _losses(history)
    if not pts:
        return None
    values = [v for _, v in pts]
    step_min, v_min = min(pts, key=lambda p: p[1])
    half = max(1, len(values) // 2)
    early, late = sum(values[:half]) / half, sum(values[half:] or values[-1:]) / max(1, len(values[half:]) or 1)
    tail = values[-max(4, len(values) // 3):]
    rises = [b - a for a, b in zip(tail, tail[1:], strict=False) if b > a]
    noisy = (len(rises) >= len(tail) // 3
             and max(rises, default=0) > max(0.1 * abs(sum(tail) / len(tail)), LOSS_NOISE_FLOOR))
    flat_step = None
    if len(values) < 3:
        trend = "falling" if values[-1] < values[0] else "flat or rising"
    elif late < early * 0.97:
        flat_from = _plateau_start(values)
        if flat_from is not None:
            share = 1 - flat_from / len(values)
            flat_step = pts[flat_from][0]
            trend = (f"fell early, then flat from step {pts[flat_from][0]} for the last {share:.0%} of the run "
                     f"(within 25 % of the final loss or {LOSS_NOISE_FLOOR:g} of it): more steps alone will not "
                     "help, a run that ends there reaches the same loss; if the score falls short, look at the "
                     "data and the targets, or the learning rate")
        else:
            trend = "falling" + (", still falling at the end" if _still_falling(values)
                                 else ", levelling off at the end")
    elif late > early * 1.03:
        trend = "rising (diverging: learning rate too high?)"
    else:
        trend = "flat (not learning: learning rate too low, or nothing left to learn)"
    if noisy and len(values) >= 6:
        trend += "; noisy (try a lower learning rate or a larger batch)"
    evals = [float(p["eval_loss"]) for p in history
             if isinstance(p, dict) and isinstance(p.get("eval_loss"), (int, float))]
    return LossSummary(points=len(pts), first=values[0], last=values[-1], min=v_min, min_step=step_min,
                       last_step=pts[-1][0], trend=trend, eval_last=evals[-1] if evals else None,
                       flat_from_step=flat_step)


def loss_table(history: list[dict[str, Any]], rows: int = 12, keep: set[int] | frozenset[int] = frozenset()) -> str:
    """A compact Markdown table of ``rows`` evenly sampled points (first and last included), plus the loss points
    at the steps in ``keep`` (the ones the loss summary names: :meth:`LossSummary.named_steps`)."""
    pts = [p for p in history if isinstance(p, dict) and (p.get("loss") is not None or p.get("eval_loss") is not None)]
    if not pts:
        return ""
    if len(pts) > rows:
        idx = {round(i * (len(pts) - 1) / (rows - 1)) for i in range(rows)}
        idx |= {i for i, p in enumerate(pts) if p.get("step") in keep and p.get("loss") is not None}
        pts = [pts[i] for i in sorted(idx)]
    # the optional columns a run logged: eval loss, lr, and the other stages' own curves (issue 40)
    extra = [k for k in ("eval_loss", "lr", "accuracy", "reward", "kl", "completion_length")
             if any(p.get(k) is not None for p in pts)]
    head = ["step", "loss", *extra]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in pts:
        cells = [str(p.get("step", "")), _num(p.get("loss")), *(_num(p.get(k)) for k in extra)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _num(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) else ""


def failure_loss_history(failure: Any) -> list[dict[str, Any]]:
    """The loss points a failed training step kept in its details (a stopped, diverged run's curve)."""
    details = getattr(failure, "details", None) or {}
    points = details.get("loss_history") if isinstance(details, dict) else None
    return [p for p in points if isinstance(p, dict)] if isinstance(points, list) else []


def planner_config(config: dict[str, Any]) -> str:
    """The trained config without the system-managed keys, as YAML."""
    kept = {k: v for k, v in config.items() if k not in SYSTEM_KEYS}
    return yaml.safe_dump(kept, sort_keys=False, allow_unicode=True).strip() if kept else ""


# Lines that never explain a failure: tqdm progress bars (`` 45%|████▌ | 900/2000 [01:03<01:17, 14.2it/s]``)
# and ftagent's own stop notice. Issue 35: a stopped run's "decisive lines" were three bars and the notice.
_NOISE = re.compile(r"(\d+%\|.*\||\|\s*\d+/\d+\s*\[|(it/s|s/it)\]|^\[ftagent\] stopped on request)")


def decisive_lines(log_tail: str, limit: int = 12) -> str:
    """The log lines that explain a failure: error-looking lines and the last lines, in order, deduplicated
    (progress bars and the stop notice left out)."""
    lines = [line.rstrip() for line in (log_tail or "").splitlines() if line.strip() and not _NOISE.search(line)]
    if not lines:
        return ""
    chosen = {i for i, line in enumerate(lines) if _DECISIVE.search(line)}
    chosen |= set(range(max(0, len(lines) - 4), len(lines)))
    picked, seen = [], set()
    for i in sorted(chosen):
        text = lines[i][:300]
        if text not in seen:
            seen.add(text)
            picked.append(text)
    return "\n".join(picked[-limit:])


def score_line(value: float | None, baseline: float | None, core_metric: str, direction: str) -> str:
    """``validation accuracy 71.0 % (baseline 62.0 %, +9.0)``."""
    from ftagent.planners.llm.numbers import format_score

    if value is None:
        return f"no validation {core_metric}"
    if baseline is None:
        return f"validation {core_metric} {format_score(value, core_metric)}"
    diff = value - baseline
    better = diff > 0 if direction == "max" else diff < 0
    return (f"validation {core_metric} {format_score(value, core_metric)} (baseline "
            f"{format_score(baseline, core_metric)}, {diff:+.4g}{'' if better or diff == 0 else ', worse'})")


def experiment_block(exp: PlannerExperiment, *, baseline: float | None, core_metric: str, direction: str,
                     detail: str = "full", best: bool = False) -> str:
    """Markdown about one experiment.

    Args:
        exp: the experiment (test-free view).
        baseline: the baseline validation score.
        core_metric: the metric's name.
        direction: ``"max"`` or ``"min"``.
        detail: ``"full"`` (config, loss table, log lines) or ``"short"`` (one paragraph).
        best: mark it as the current best.
    """
    hyp = exp.hypothesis
    internal = is_internal_error(exp.failure)
    flags = list(getattr(exp, "integrity_flags", None) or [])
    status = "✅ became the best" if exp.decision else (
        "⚠️ failed by an internal error of the system" if internal else "❌ failed" if exp.failure else
        "🚫 not eligible (integrity guard)" if flags else "➖ not better")
    lines = [f"### Loop {exp.loop}{' (current best)' if best else ''}: {status}; "
             f"{score_line(exp.val_score, baseline, core_metric, direction)}"]
    lines += integrity_lines(flags)
    if hyp is not None:
        lines.append(f"- Hypothesis: {hyp.hypothesis.strip()}")
        from ftagent.planners.llm.stages import stage_line

        lines += [line for line in (stage_line(exp),) if line]  # issue 40: stage, start weights, their sampling
        if detail == "full" and hyp.task:
            lines.append(f"- Task: {hyp.task.strip()}")
    if exp.data_rows is not None:
        lines.append(f"- Training data: {exp.data_rows:,} rows produced by process_data.py")
    printed = data_script_output(exp, 20 if detail == "full" else 5)
    if printed:
        lines += ["- What process_data.py printed (last lines):", "```", printed, "```"]
    history = exp.loss_history or failure_loss_history(exp.failure)
    summary = loss_summary(history)
    if summary is not None:
        lines.append(f"- Training loss: {summary.line()}")
    speed = throughput_line(exp)
    if speed:
        lines.append(f"- Training speed (measured): {speed}")
    if exp.system_changes:
        lines.append("- Changes the system made to the planner's train.yaml: " + "; ".join(exp.system_changes))
    if exp.failure is not None:
        f = exp.failure
        lines.append(f"- Failure: stage {f.stage}, type {f.error_type.value}: {clip_text(f.message, 500)}")
        if internal:
            lines.append(f"- This is {INTERNAL_NOTE}.")
        elif f.suggestion:
            lines.append(f"- Checker's suggestion: {clip_text(f.suggestion, 400)}")
        log = decisive_lines(f.log_tail, 12 if detail == "full" else 4)
        if log:
            lines += ["- Decisive log lines:", "```", log, "```"]
    if exp.reason:
        lines.append(f"- Feedback: {clip_text(short_paths(exp.reason), 2000 if detail == 'full' else 700)}")
    next_step = getattr(exp, "next_step", "")
    if next_step:
        lines.append(f"- Suggested next step: {clip_text(next_step, 2000 if detail == 'full' else 700)}")
    if detail == "full":
        config = planner_config(exp.config)
        if config:
            lines += ["- Config actually trained (system paths left out):", "```yaml", config, "```"]
        table = loss_table(history, keep=summary.named_steps() if summary is not None else frozenset())
        if table:
            lines += ["- Loss curve (sampled):", table]
    return "\n".join(lines)
