"""History that teaches: experiments as the planner reads them (never with test scores).

For each experiment the planner sees the hypothesis, the config that was actually trained (and every
change the system made to the planner's config), the data it trained on (rows produced), a loss
summary (first / last / min, trend) with a compact sampled table (:mod:`.loss_words`), the validation score against the
baseline, and for failures the error type and the decisive log lines. Everything here works on
:class:`~ftagent.planners.llm.propose.PlannerExperiment`, which has no field for test scores.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ftagent.core.untrusted import read_last
from ftagent.planners.llm.loss_words import failure_loss_history, loss_summary, loss_table

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
    if summary is not None and any(isinstance(p, dict) and p.get("reward") is not None for p in history):
        # relay round r3: a GRPO run's loss (-0.014 .. 0.07) was read as "falling, still falling at the end; noisy
        # (try a lower learning rate ...)"; TRL's GRPO loss is the clipped policy objective, not a fit to targets
        lines.append(f"- Training loss (GRPO's policy objective, near 0 by construction: not a convergence measure; "
                     f"the reward and kl columns below say what the run learnt): first {summary.first:.4g}, last "
                     f"{summary.last:.4g} (step {summary.last_step})")
    elif summary is not None:
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
