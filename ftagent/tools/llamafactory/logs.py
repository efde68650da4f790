"""Read what LLaMA-Factory leaves behind: loss histories and failure logs.

* :func:`read_loss_history` merges ``trainer_log.jsonl`` (one line per ``logging_steps``, and a final
  line without ``loss``) with ``trainer_state.json``'s ``log_history`` into :class:`LossPoint` rows.
* :func:`classify_failure` turns a failed run's log into an :class:`~ftagent.core.errors.ErrorType`, the
  relevant log lines and a suggestion for the next round.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ftagent.core.errors import ErrorType

TRAINER_LOG = "trainer_log.jsonl"
TRAINER_STATE = "trainer_state.json"


class LossPoint(BaseModel):
    """One logged point of a training run."""

    step: int
    loss: float | None = None
    eval_loss: float | None = None
    lr: float | None = None
    epoch: float | None = None
    # issue 40, the other stages' own curves: DPO/KTO preference accuracy (LLaMA-Factory's
    # ``rewards/accuracies``), GRPO's mean reward, KL to the reference and completion length (TRL)
    accuracy: float | None = None
    reward: float | None = None
    kl: float | None = None
    completion_length: float | None = None
    # DPO's rewards/chosen (pref_beta × the chosen answer's log-prob change against the reference): below 0 the
    # policy makes the right answer less likely than its start did, even while the preference accuracy rises
    # (relay round r3: a DPO loop fell from 22.5 % to 17.5 % with accuracy 0.75 and chosen reward -0.011)
    chosen_reward: float | None = None


# where each stage metric is found: trainer_log.jsonl's key first, then trainer_state.json's log_history key
STAGE_METRICS: dict[str, tuple[str, ...]] = {"accuracy": ("accuracy", "rewards/accuracies"), "reward": ("reward",),
                                             "kl": ("kl",), "completion_length": ("completion_length",
                                                                                  "completions/mean_length"),
                                             "chosen_reward": ("rewards/chosen",)}


def _stage_metrics(row: dict[str, Any]) -> dict[str, float | None]:
    return {name: next((_num(row[k]) for k in keys if k in row), None) for name, keys in STAGE_METRICS.items()}


def _num(value: Any) -> float | None:
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def parse_trainer_log(path: Path) -> list[LossPoint]:
    """Rows of ``trainer_log.jsonl`` that carry a loss or an eval loss (bad lines are skipped)."""
    points: list[LossPoint] = []
    path = Path(path)
    if not path.is_file():
        return points
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a half-written last line
        if not isinstance(row, dict) or ("loss" not in row and "eval_loss" not in row):
            continue
        step = row.get("current_steps", row.get("step"))
        if step is None:
            continue
        points.append(LossPoint(step=int(step), loss=_num(row.get("loss")), eval_loss=_num(row.get("eval_loss")),
                                lr=_num(row.get("lr", row.get("learning_rate"))), epoch=_num(row.get("epoch")),
                                **_stage_metrics(row)))
    return points


def parse_trainer_state(path: Path) -> tuple[list[LossPoint], dict[str, Any]]:
    """``(points, summary)`` from ``trainer_state.json``: log_history rows with loss/eval_loss, and the
    final summary row (``train_loss``, ``train_runtime`` ...)."""
    path = Path(path)
    if not path.is_file():
        return [], {}
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return [], {}
    points: list[LossPoint] = []
    summary: dict[str, Any] = {}
    for row in state.get("log_history", []) if isinstance(state, dict) else []:
        if not isinstance(row, dict):
            continue
        if "train_loss" in row or "train_runtime" in row:
            summary.update(row)
            continue
        if "loss" not in row and "eval_loss" not in row:
            continue
        points.append(LossPoint(step=int(row.get("step", 0)), loss=_num(row.get("loss")),
                                eval_loss=_num(row.get("eval_loss")), lr=_num(row.get("learning_rate")),
                                epoch=_num(row.get("epoch")), **_stage_metrics(row)))
    return points, summary


def _merge(rows: list[LossPoint]) -> list[LossPoint]:
    by_step: dict[int, LossPoint] = {}
    for row in rows:
        have = by_step.get(row.step)
        if have is None:
            by_step[row.step] = row.model_copy()
            continue
        for field in ("loss", "eval_loss", "lr", "epoch", *STAGE_METRICS):
            if getattr(have, field) is None and getattr(row, field) is not None:
                setattr(have, field, getattr(row, field))
    return [by_step[s] for s in sorted(by_step)]


def read_loss_history(output_dir: Path) -> tuple[list[LossPoint], dict[str, Any]]:
    """The loss history of a run in ``output_dir`` (state file first, the jsonl fills gaps)."""
    output_dir = Path(output_dir)
    state_points, summary = parse_trainer_state(output_dir / TRAINER_STATE)
    return _merge(state_points + parse_trainer_log(output_dir / TRAINER_LOG)), summary


def finite_loss_steps(points: list[LossPoint]) -> list[LossPoint]:
    """Points of completed steps (step ≥ 1) whose training loss is a finite number."""
    return [p for p in points if p.step >= 1 and p.loss is not None and math.isfinite(p.loss)]


# --- failure classification -------------------------------------------------------------------------

_OOM_HINT = ("Lower per_device_train_batch_size or cutoff_len, raise gradient_accumulation_steps, use LoRA, "
             "or enable gradient checkpointing.")
# (error type, regex, suggestion); first match wins, so specific causes come before generic ones.
_RULES: list[tuple[ErrorType, str, str]] = [
    (ErrorType.OOM, r"out of memory|OutOfMemoryError|Cannot allocate memory|MemoryError|oom-kill|Killed", _OOM_HINT),
    (ErrorType.ENV, r"ModuleNotFoundError|ImportError|command not found|No such file or directory: '[^']*cli'"
                    r"|undefined symbol|CUDA driver|No CUDA GPUs are available|Torch not compiled with CUDA",
     "The tool environment is broken or lacks a package; this is not fixable by changing train.yaml."),
    (ErrorType.DATA, r"Cannot find valid samples|Undefined dataset|dataset_info\.json|DatasetGenerationError"
                     r"|JSONDecodeError|Dataset is empty|No (?:valid )?samples|num_samples=0|empty dataset"
                     r"|File .* not found|corresponds to no data",
     "Check data.json: a non-empty list of Alpaca rows with non-empty instruction and output, and rows "
     "shorter than cutoff_len."),
    (ErrorType.CONFIG, r"ValueError|TypeError|KeyError|AssertionError|NotImplementedError|is not a valid"
                       r"|invalid choice|argument|unrecognized|must be|Please|not supported|yaml",
     "Fix the value named in the error in train.yaml; use only parameters and values LLaMA-Factory accepts."),
    # A collective between ranks failed or timed out. Checked after every other cause: when one rank dies
    # (OOM, a bad value) the others wait in a collective and their watchdogs report a timeout too. Alone it
    # is the machine (interconnect, P2P, a hung GPU) or a rank stalled past ddp_timeout, so ENV: changing
    # the learning rate or the batch size does not help.
    (ErrorType.ENV, r"NCCL|Watchdog caught collective operation timeout|DistBackendError",
     "A collective operation between GPUs (NCCL) failed or timed out: the interconnect, a hung GPU, or one "
     "rank stalled longer than ddp_timeout (e.g. long preprocessing); not fixable by learning rate or "
     "batch size. Try fewer GPUs, or raise ddp_timeout if one rank preprocesses for long."),
]
# A generic error raised inside dataset loading code is a data problem.
_DATA_FRAMES = re.compile(r"llamafactory/data/(?:loader|parser|converter)\.py|site-packages/datasets/")
_ERROR_LINE = re.compile(r"(Error|Exception|error:|Traceback|Killed|out of memory)", re.IGNORECASE)

# --- torchrun: the ranks' own output, then the launchers' wrappers ---
# LLaMA-Factory runs several GPUs as `torchrun ... launcher.py train.yaml` under subprocess.run(check=True)
# (llamafactory/cli.py), so a failed run ends with torchrun's ChildFailedError report
# (torch/distributed/elastic/multiprocessing/errors/__init__.py: "Root Cause (first observed failure)")
# and then CalledProcessError naming the yaml. Those lines say only that a rank failed; the cause is in
# the ranks' output above them (since torch 2.4 each rank's stderr line is prefixed "[rankN]:").
_RANK_PREFIX = re.compile(r"^\[rank(\d+)\]:\s?")
_TORCHRUN_MARK = re.compile(r"errors\.ChildFailedError|CalledProcessError: Command '\['torchrun'"
                            r"|failed \(exitcode: -?\d+\) local_rank|Root Cause \(first observed failure\)")
_WRAPPER_START = re.compile(r"Sending process \d+ closing signal|failed \(exitcode: -?\d+\) local_rank"
                            r"|errors\.ChildFailedError|CalledProcessError|Root Cause \(first observed failure\)"
                            r"|^\s*File \".*(?:bin/torchrun|torch/distributed/(?:run|launcher/api)\.py"
                            r"|bin/llamafactory-cli|llamafactory/cli\.py)")
_EXITCODE = re.compile(r"exitcode\s*:\s*(-?\d+)|failed \(exitcode: (-?\d+)\)|Signal (\d+) \(SIG")
_ROOT_CAUSE_FIELDS = re.compile(r"^\s*(?:rank|exitcode|traceback)\s*:")


class FailureInfo(BaseModel):
    """A classified failure of a LLaMA-Factory run."""

    error_type: ErrorType
    message: str
    log_tail: str
    suggestion: str


def split_launcher(log: str) -> tuple[str, str]:
    """``(ranks' output, launcher wrapper)`` of a torchrun log; ``(log, "")`` when torchrun did not fail.

    The wrapper starts at the first line torchrun's agent or llamafactory-cli print once a rank has died
    (the SIGTERMs to the other ranks, the agent's ``failed (exitcode: …)``, the torchrun/llamafactory-cli
    traceback frames, ChildFailedError, CalledProcessError)."""
    if not _TORCHRUN_MARK.search(log):
        return log, ""
    lines = log.splitlines()
    # a "[rankN]:" line is a rank's own output, whatever it mentions
    cut = next((i for i, line in enumerate(lines) if not _RANK_PREFIX.match(line) and _WRAPPER_START.search(line)),
               len(lines))
    if cut > 0 and lines[cut - 1].strip().startswith("Traceback"):
        cut -= 1  # the wrapper's own "Traceback (most recent call last):"
    return "\n".join(lines[:cut]), "\n".join(lines[cut:])


def _unprefixed(line: str) -> tuple[str | None, str]:
    match = _RANK_PREFIX.match(line)
    return (match.group(1), line[match.end():]) if match else (None, line)


def _tail_of(text: str, max_chars: int) -> str:
    lines = text.splitlines()
    start = max((i for i, line in enumerate(lines) if _unprefixed(line)[1].startswith("Traceback")), default=None)
    if start is not None:
        picked = lines[start:]
    else:
        errors = [line for line in lines if _ERROR_LINE.search(line)]
        picked = errors[-20:] + ["..."] + lines[-20:]
    text = "\n".join(picked)
    return text if len(text) <= max_chars else "...\n" + text[-max_chars:]


def relevant_lines(log: str, max_chars: int = 4000) -> str:
    """The last traceback (or error lines) plus the last lines of the log, bounded.

    For a failed torchrun these come from the ranks' output, not from the launchers' wrapper; the wrapper
    adds only its root-cause summary (rank, exit code, signal)."""
    body, wrapper = split_launcher(log)
    if not wrapper:
        return _tail_of(log, max_chars)
    summary = [line.strip() for line in wrapper.splitlines() if _ROOT_CAUSE_FIELDS.match(line)]
    note = "\n[torchrun root cause] " + "; ".join(summary) if summary else ""
    return _tail_of(body, max(500, max_chars - len(note))) + note if body.strip() else note.strip()


def _is_error_line(stripped: str) -> bool:
    return bool(re.match(r"^[\w.]*(Error|Exception|Killed)\b", stripped)) or "out of memory" in stripped.lower() \
        or "Watchdog caught collective operation timeout" in stripped


def _last_error_line(log: str) -> str:
    for line in reversed(log.splitlines()):
        stripped = _unprefixed(line)[1].strip()
        if _is_error_line(stripped):
            return stripped[:500]
    return ""


def _raising_frame(log: str, error_line: str) -> str:
    """The ``File "…"`` line nearest above ``error_line`` (where the error was raised)."""
    lines = [_unprefixed(line)[1].strip() for line in log.splitlines()]
    idx = max((i for i, line in enumerate(lines) if line and line[:500] == error_line), default=len(lines))
    return next((line for line in reversed(lines[:idx]) if line.startswith('File "')), "")


def _match(text: str) -> tuple[ErrorType, str] | None:
    for error_type, pattern, suggestion in _RULES:
        flags = re.IGNORECASE if error_type is not ErrorType.CONFIG else 0
        if text and re.search(pattern, text, flags):
            return error_type, suggestion
    return None


def _ranks_root_cause(body: str) -> tuple[str, ErrorType, str] | None:
    """The most specific cause among each rank's last error line: one rank's OOM or bad value beats the
    NCCL timeouts it causes in the others (rule order of :data:`_RULES`)."""
    last: dict[str | None, str] = {}
    for line in body.splitlines():
        rank, text = _unprefixed(line)
        if _is_error_line(text.strip()):
            last[rank] = text.strip()[:500]
    best: tuple[int, str, ErrorType, str] | None = None
    for text in last.values():
        for order, (error_type, pattern, suggestion) in enumerate(_RULES):
            flags = re.IGNORECASE if error_type is not ErrorType.CONFIG else 0
            if re.search(pattern, text, flags):
                if best is None or order < best[0]:
                    best = (order, text, error_type, suggestion)
                break
    return best[1:] if best else None


def _classify_torchrun(body: str, wrapper: str, tail: str, exit_code: int | None) -> FailureInfo:
    found = _ranks_root_cause(body)
    if found is not None:
        message, error_type, suggestion = found
        if error_type is ErrorType.CONFIG and _DATA_FRAMES.search(_raising_frame(body, message)):
            error_type, suggestion = ErrorType.DATA, _RULES[2][2]  # raised while loading data
        return FailureInfo(error_type=error_type, message=message, log_tail=tail, suggestion=suggestion)
    codes = {int(next(g for g in m.groups() if g is not None)) for m in _EXITCODE.finditer(wrapper)}
    if codes & {-9, 9, 137}:  # SIGKILL with no error text in any rank: the host's OOM killer
        return FailureInfo(error_type=ErrorType.OOM, log_tail=tail, suggestion=_OOM_HINT,
                           message="a training rank was killed by SIGKILL (exitcode -9; likely host out of memory)")
    return FailureInfo(error_type=ErrorType.UNKNOWN, log_tail=tail, suggestion="Read the log tail.",
                       message=f"a torchrun rank failed (exit codes {sorted(codes) or exit_code}) with no error text")


def classify_failure(log: str, *, exit_code: int | None, timed_out: bool = False,
                     timeout_s: float | None = None) -> FailureInfo:
    """Classify a failed LLaMA-Factory run from its log text and exit status.

    A multi-GPU run is judged by its ranks' output, never by torchrun's or llamafactory-cli's wrapper
    lines (``ChildFailedError``, ``CalledProcessError … train.yaml``), see :func:`split_launcher`."""
    tail = relevant_lines(log)
    if timed_out:
        return FailureInfo(error_type=ErrorType.TIMEOUT, log_tail=tail,
                           message=f"run did not finish within {timeout_s or '?'} s",
                           suggestion="Train fewer steps or samples, shorten cutoff_len, or use a smaller "
                                      "batch per step.")
    body, wrapper = split_launcher(log)
    if wrapper:
        return _classify_torchrun(body, wrapper, tail, exit_code)
    error_line = _last_error_line(log)
    if exit_code in (137, -9) and not error_line:
        return FailureInfo(error_type=ErrorType.OOM, log_tail=tail, message="process killed (likely out of memory)",
                           suggestion=_OOM_HINT)
    if exit_code == 127:
        return FailureInfo(error_type=ErrorType.ENV, log_tail=tail, message="executable not found",
                           suggestion=_RULES[1][2])
    for text in (error_line, tail):  # the final error line decides; the tail only when it is silent
        found = _match(text)
        if found is not None:
            error_type, suggestion = found
            if error_type is ErrorType.CONFIG and _DATA_FRAMES.search(tail):
                error_type, suggestion = ErrorType.DATA, _RULES[2][2]  # raised while loading data
            return FailureInfo(error_type=error_type, log_tail=tail, suggestion=suggestion,
                               message=error_line or f"LLaMA-Factory failed (exit {exit_code})")
    return FailureInfo(error_type=ErrorType.UNKNOWN, log_tail=tail, suggestion="Read the log tail.",
                       message=error_line or f"LLaMA-Factory failed (exit {exit_code})")
