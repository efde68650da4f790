"""The validate step of a GRPO loop (issue 40): the config checked against TRL's GRPOConfig, a two-step run.

Called by :class:`ftagent.tools.llamafactory.validator.LlamaFactoryValidator` for a ``grpo`` hypothesis,
after the data check (Alpaca rows: the prompts and their golds). The planner's keys are filtered
(:func:`.config.filter_grpo_config`), the system's injected (:func:`.config.manage_grpo_config`), the
result written back as ``train.yaml``; the generation batch must hold whole groups; then a micro run
(two optimizer steps on eight prompts, :func:`.config.micro_grpo_config`) must log a finite loss. A
benchmark whose scorer cannot serve as a reward (no reward spec) fails here with CONFIG.
"""

from __future__ import annotations

import math
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ftagent.core.errors import ErrorType
from ftagent.core.types import CodeResult, ValidationReport
from ftagent.core.untrusted import UnsafeEntry
from ftagent.runners.fresh import FreshRun
from ftagent.tools.llamafactory import validation as v
from ftagent.tools.llamafactory.config import DATA_FILE, dump_yaml, system_env
from ftagent.tools.llamafactory.debug_output import drop_weights
from ftagent.tools.llamafactory.launch import visible_gpus
from ftagent.tools.llamafactory.logs import (
    classify_failure,
    finite_loss_steps,
    read_loss_history,
    relevant_lines,
)
from ftagent.tools.llamafactory.trainer import lf_env, read_run_log
from ftagent.tools.trl.config import filter_grpo_config, group_problem, manage_grpo_config, micro_grpo_config
from ftagent.tools.trl.run import run_grpo

if TYPE_CHECKING:
    from ftagent.engine.loop import StepContext
    from ftagent.engine.session import SessionState


def validate_grpo(validator: Any, code: CodeResult, workspace: Path, original: dict[str, Any],
                  n_rows: int, ctx: StepContext[SessionState] | None, report: ValidationReport) -> None:
    """Filter, manage and write the GRPO config, then prove it trains (fills ``report``). ``validator``: the
    calling ``LlamaFactoryValidator`` (its scenario, settings, runner and catalogue)."""
    scenario = validator.scenario
    if code.reward is None:
        v._fail(report, ErrorType.CONFIG, f"benchmark {scenario.benchmark}'s scorer cannot serve as a GRPO reward",
                suggestion="Use an SFT or preference stage for this benchmark.")
        return
    kept, dropped = filter_grpo_config(original, validator.catalogue)
    report.dropped_keys = [str(d) for d in dropped]
    if v.refuse_paths(original, dropped, report):
        return
    start = v.start_path(code, scenario)
    managed = manage_grpo_config(kept, workspace=workspace, start_path=start, hardware=scenario.hardware)
    report.injected_keys = managed.injected
    report.micro_batch["notes"] = managed.notes
    report.changes = v.config_changes(original, managed.config, dropped, managed.notes,
                                      bookkeeping={"report_to", "save_only_model", "overwrite_output_dir",
                                                   "remove_unused_columns", "log_completions", "push_to_hub",
                                                   "dataset_file", "stage"})
    final_path = dump_yaml(managed.config, workspace / v.CONFIG_FILE)
    (workspace / v.MANAGED_MARKER).write_text(v._sha(final_path.read_text(encoding="utf-8")), encoding="utf-8")
    report.config_path = str(final_path)
    v.refuse_unbounded(managed.config, report)
    if report.failure:
        return
    problem = group_problem(managed.config, max(1, scenario.hardware.gpu_count))
    if problem:
        v._fail(report, ErrorType.CONFIG, problem,
                suggestion="Make per_device_train_batch_size × gradient_accumulation_steps a multiple of num_generations.")
        return
    _micro_run(validator, code, workspace, managed.config, start, ctx, report)


def _micro_run(validator: Any, code: CodeResult, workspace: Path, config: dict[str, Any],
               start: str, ctx: StepContext[SessionState] | None, report: ValidationReport) -> None:
    assert code.reward is not None
    scenario = validator.scenario
    debug = workspace / v.DEBUG_DIR
    shutil.rmtree(debug, ignore_errors=True)  # an earlier round's log (rmtree never follows a link)
    debug.mkdir(parents=True)
    # a fresh folder beside the workspace, the checked debug data copied in: the workspace is never bound
    run = FreshRun.beside(workspace, v.VALIDATE_RUN, v.MICRO_RUN).make()
    try:
        run.stage_copy(workspace, DATA_FILE)
    except (OSError, UnsafeEntry) as exc:
        v._fail(report, ErrorType.DATA, f"data.json: {exc.strerror or exc}",
                suggestion="Write data.json as a regular file in the current directory.")
        return
    micro = {**micro_grpo_config(config, run.work), "dataset_dir": str(run.inputs)}
    path = dump_yaml(micro, run.inputs / "train_micro.yaml")
    timeout = float(validator.settings.ft.micro_batch_timeout)
    timeout = ctx.limit(timeout) if ctx else timeout
    started = time.monotonic()
    result = run_grpo(path, validator.runner, reward=code.reward, workdir=run.work,
                      mounts=run.mounts(*v.start_mounts(start, scenario)),
                      env=lf_env(run, system_env(scenario.hardware)),
                      timeout=timeout, log_file=debug / "train_micro.log", gpus=visible_gpus(scenario.hardware))
    run.drop_scratch()
    points, _ = read_loss_history(Path(micro["output_dir"]))
    good = finite_loss_steps(points)
    freed = drop_weights(Path(micro["output_dir"]))
    report.micro_batch.update(config_path=str(path), output_dir=str(micro["output_dir"]), exit_code=result.exit_code,
                              timed_out=result.timed_out, duration_s=round(time.monotonic() - started, 2),
                              steps_logged=len(points), losses=[p.loss for p in points], log_file=str(debug / "train_micro.log"),
                              weights_removed_mb=round(freed / 2**20, 1))
    bad = next((p for p in points if p.loss is not None and not math.isfinite(p.loss)), None)
    if result.ok and bad is not None:
        v._fail(report, ErrorType.DIVERGED, f"GRPO micro run diverged at step {bad.step}: loss {bad.loss}",
                log_tail=relevant_lines(read_run_log(result)), suggestion="Lower learning_rate, or raise beta.")
    elif result.ok and good:
        report.passed = True
    elif result.ok:
        v._fail(report, ErrorType.CONFIG, "GRPO micro run exited 0 but logged no step with a finite loss",
                log_tail=relevant_lines(read_run_log(result)), suggestion="Check logging_steps and the data.")
    else:
        info = classify_failure(read_run_log(result), exit_code=result.exit_code, timed_out=result.timed_out,
                                timeout_s=timeout)
        v._fail(report, info.error_type, f"GRPO micro run failed: {info.message}", log_tail=info.log_tail,
                suggestion=info.suggestion, details={"exit_code": result.exit_code})
