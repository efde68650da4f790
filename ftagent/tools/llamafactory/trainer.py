"""Training with LLaMA-Factory through a runner: data processing, ``llamafactory-cli train``, merge.

* :func:`run_data_processing` — ``python process_data.py [--debug]`` in the workspace (tool "data").
* :class:`LlamaFactoryTrainer` — the train step (``FT_TRAINER`` default): runs the validated
  ``train.yaml`` in its own fresh folder (:mod:`.train_run`, never the workspace), parses the loss history,
  keeps the model under ``train/loop_<n>/run/output``. While it runs,
  every ``trainer_log.jsonl`` point goes to the early-stop watch (:mod:`.early_stop`): a diverging run
  is stopped through the runner and raised as a ``DIVERGED`` step error. With ``FT_REPORT_TO`` the
  full run reports to a tracker (:mod:`.tracking`), and :meth:`LlamaFactoryTrainer.log_scores` adds the
  validation score to that run after evaluation.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ftagent.core.disk import check_disk_full
from ftagent.core.errors import ErrorType, StepError
from ftagent.core.types import CodeResult, TrainResult, ValidationReport
from ftagent.runners.base import Mount, Runner, RunResult, capabilities
from ftagent.runners.fresh import FreshRun
from ftagent.runners.scrubbed import run_scrubbed
from ftagent.tools.llamafactory import tracking
from ftagent.tools.llamafactory.config import DATA_FILE, system_env
from ftagent.tools.llamafactory.defaults import load_lf_defaults
from ftagent.tools.llamafactory.early_stop import Divergence, DivergenceWatch, EarlyStopRule
from ftagent.tools.llamafactory.launch import launch_env, visible_gpus
from ftagent.tools.llamafactory.logs import classify_failure, read_loss_history, relevant_lines
from ftagent.tools.llamafactory.progress import TrainerLogFollower, progress_detail
from ftagent.tools.llamafactory.train_run import run_config, run_of_model, stage_training, write_run_config

if TYPE_CHECKING:
    from ftagent.core.settings import Settings
    from ftagent.core.types import EvalResult, ScenarioInfo
    from ftagent.engine.loop import StepContext
    from ftagent.engine.session import SessionState

MODEL_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
               "pytorch_model.bin.index.json")
ADAPTER_FILES = ("adapter_model.safetensors", "adapter_model.bin")
TRACK_RUN = "track"  # the tracker's commands: a fresh folder beside the training's (train/loop_<n>/track)


def lf_env(run: FreshRun, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment of a LLaMA-Factory (or GRPO) run: defaults.yaml ``env``; every cache (the HF datasets cache
    included: ``datasets`` keys a local file's entry by its path and mtime only, so a planted entry would stand in
    for the scanned data.json, red team B2) and ``TMPDIR`` inside the run's own fresh folder."""
    env = dict(load_lf_defaults().env)
    env.update(run.env())
    env.update(extra or {})
    return env


def read_run_log(result: RunResult, max_bytes: int = 400_000) -> str:
    """The run's full log (its tail when large), else ``result.log_tail``."""
    if result.log_file and Path(result.log_file).is_file():
        data = Path(result.log_file).read_bytes()
        return data[-max_bytes:].decode("utf-8", errors="replace")
    return result.log_tail or ""


def accepts_stop(runner: Runner) -> bool:
    """Whether ``runner.run`` may be passed ``stop``: the runner class declares ``stops_on_event`` (the built-in
    runners do; a plug-in that declares nothing runs every command to its end). A wrapper with an ``inner``
    runner (recording, a trial's slot) is asked about its inner runner (:func:`ftagent.runners.base.capabilities`)."""
    return capabilities(runner).stops_on_event


def run_llamafactory(subcommand: str, config_path: Path, runner: Runner, *, workdir: Path,
                     mounts: list[Mount], env: dict[str, str], timeout: float | None,
                     log_file: Path, gpus: str | None = None, stop: threading.Event | None = None) -> RunResult:
    """``llamafactory-cli <subcommand> <config>`` in the training tool env (``gpus``: the visible set;
    ``stop``: ends the run early, passed only to a runner that takes it)."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    extra = {"stop": stop} if stop is not None and accepts_stop(runner) else {}
    return run_scrubbed(runner, ["llamafactory-cli", subcommand, str(config_path)], tree=workdir, tool="train",
                        workdir=workdir, env=env, mounts=mounts, gpus=gpus, timeout=timeout, log_file=log_file,
                        **extra)


def run_data_processing(workspace: Path, runner: Runner, timeout: float, debug: bool = False,
                        env: dict[str, str] | None = None, mounts: list[Mount] | None = None) -> RunResult:
    """Run ``python process_data.py [--debug]`` in the workspace (tool "data"); expect ``data.json``.

    Raises:
        StepError: DATA (non-zero exit, or no data.json) or TIMEOUT, with the log tail.
    """
    workspace = Path(workspace).absolute()
    cmd = ["python", "process_data.py"] + (["--debug"] if debug else [])
    log_file = workspace / "logs" / f"process_data{'_debug' if debug else ''}.log"
    log_file.parent.mkdir(parents=True, exist_ok=True)
    result = run_scrubbed(runner, cmd, tree=workspace, tool="data", workdir=workspace, env=env,
                          mounts=[Mount(source=workspace, read_only=False), *(mounts or [])],
                          timeout=timeout, log_file=log_file)
    if result.timed_out:
        raise StepError(f"process_data.py did not finish within {timeout:.0f} s", error_type=ErrorType.TIMEOUT,
                        log_tail=relevant_lines(read_run_log(result)),
                        suggestion="Process fewer samples or make the script faster.")
    if not result.ok:
        check_disk_full(read_run_log(result), "data processing", [workspace])
        raise StepError(f"process_data.py failed (exit {result.exit_code})", error_type=ErrorType.DATA,
                        log_tail=relevant_lines(read_run_log(result)),
                        suggestion="Fix the traceback in process_data.py.")
    if not (workspace / DATA_FILE).is_file():
        raise StepError("process_data.py exited 0 but wrote no data.json", error_type=ErrorType.DATA,
                        log_tail=result.log_tail[-2000:],
                        suggestion="Write the Alpaca list to data.json in the current directory.")
    return result


def model_kind(output_dir: Path) -> str | None:
    """``"lora"`` when ``output_dir`` holds an adapter, ``"full"`` for full weights, else None."""
    output_dir = Path(output_dir)
    if (output_dir / "adapter_config.json").is_file() and any((output_dir / f).is_file() for f in ADAPTER_FILES):
        return "lora"
    if (output_dir / "config.json").is_file() and (
        any((output_dir / f).is_file() for f in MODEL_FILES) or any(output_dir.glob("model-*.safetensors"))
    ):
        return "full"
    return None


def _sampled(points: list[dict[str, Any]], most: int = 200) -> list[dict[str, Any]]:
    """At most ``most`` evenly spaced points, the first and last kept (the failure's details are stored)."""
    if len(points) <= most:
        return points
    return [points[round(i * (len(points) - 1) / (most - 1))] for i in range(most)]


def last_good_checkpoint(output_dir: Path, before_step: int) -> Path | None:
    """The newest ``checkpoint-N`` (HF Trainer's ``save_steps`` folders) saved before ``before_step``
    that holds a model, or None."""
    found = []
    for path in Path(output_dir).glob("checkpoint-*"):
        step = path.name.removeprefix("checkpoint-")
        if step.isdigit() and int(step) < before_step and model_kind(path) is not None:
            found.append((int(step), path))
    return max(found)[1] if found else None


class LlamaFactoryTrainer:
    """The train step: ``llamafactory-cli train train.yaml`` on the validated workspace."""

    def __init__(self, scenario: ScenarioInfo, settings: Settings, runner: Runner) -> None:
        self.scenario = scenario
        self.settings = settings
        self.runner = runner
        self._tracker_started = False  # check_tracker passed once: the tracker's library and store work

    @staticmethod
    def _run_extra(run: tracking.TrackingRun | None, rule: EarlyStopRule, env: dict[str, str],
                   ray: bool) -> dict[str, Any]:
        """The full run's keys beyond the validated config: the tracker's and, with early stop on,
        ``logging_nan_inf_filter: false`` (transformers would otherwise log a NaN step as the mean of the others,
        and the watch could not see it); for a multi-node trial (``ray``: the Ray executor marked this task as larger
        than one node) LLaMA-Factory's Ray keys, whose variables go into ``env`` (``USE_RAY=1`` ...)."""
        extra: dict[str, Any] = tracking.config_overrides(run)
        if rule.enabled:
            extra["logging_nan_inf_filter"] = False
        if ray:
            from ftagent.jobs.ray_training import overrides_from_env

            overrides, ray_env = overrides_from_env()
            extra.update(overrides)
            env.update(ray_env)  # after launch_env: Ray overrides torchrun
        return extra

    def _diverged(self, verdict: Divergence, result: RunResult, output_dir: Path, config: dict[str, Any],
                  ctx: StepContext[SessionState] | None, *, stopped: bool) -> TrainResult:
        """Record the stopped run (a training event with the stop and the time it saved). When the run
        saved a checkpoint before its loss left the bar, that checkpoint is the loop's model (returned,
        then evaluated like any model: issue 35, a stopped run lost its whole loop); otherwise raise the
        feedback for the next loop. The log and ``trainer_log.jsonl`` stay where they are."""
        from ftagent.engine.events import EarlyStopFacts, TrainingEvent

        saved = verdict.saved_s if stopped else 0.0
        points, _ = read_loss_history(output_dir)
        facts = EarlyStopFacts(**verdict.model_dump(exclude={"saved_s", "stopped"}), saved_s=saved, stopped=stopped)
        good = last_good_checkpoint(output_dir, verdict.since_step or verdict.step)
        rule = EarlyStopRule.from_settings(self.settings.ft)
        if ctx is not None:
            ctx.emit(TrainingEvent(output_dir=str(good or output_dir), finetuning_type=config.get("finetuning_type"),
                                   loss_history=[p.model_dump() for p in points], config=config,
                                   early_stop=facts))
        how = "stopped" if stopped else "ran to its end (this runner cannot stop a command early)"
        if good is not None:
            kind = model_kind(good)
            return TrainResult(
                output_dir=str(good), model_path=str(good),
                adapter_of=str(config.get("model_name_or_path")) if kind == "lora" else None,
                finetuning_type=str(config.get("finetuning_type", kind)), template=config.get("template"),
                enable_thinking=config.get("enable_thinking"), loss_history=[p.model_dump() for p in points],
                config=config, duration_s=verdict.elapsed_s or 0.0)
        raise StepError(
            f"training {verdict.message()}; the run was {how} (no checkpoint saved before the rise to evaluate)",
            error_type=ErrorType.DIVERGED, log_tail=relevant_lines(read_run_log(result)),
            suggestion="Lower learning_rate (by 3-10x), add warmup_steps, or clip gradients (max_grad_norm)"
                       + (f"; the loss and its smoothed curve stayed above {rule.loss_ratio:g}× its best and over "
                          f"{rule.min_rise:g} nats above it for {rule.patience_steps}+ steps."
                          if verdict.reason == "rise" else "."),
            details={"early_stop": facts.model_dump(), "exit_code": result.exit_code,
                     "loss_history": _sampled([p.model_dump() for p in points]),  # the planner's loss table
                     "log_file": result.log_file, "trainer_log": str(output_dir / "trainer_log.jsonl")})

    def _start_tracker(self, run: tracking.TrackingRun | None, workspace: Path, train_run: FreshRun) -> None:
        """Before the first full training: a tracker that cannot start is a CONFIG error with its cause
        (issue 32 item 3: a missing mlflow failed inside transformers' callback as UNKNOWN). It runs in a fresh
        folder beside the training's (``train/loop_<n>/track``), never in the workspace."""
        if run is None or self._tracker_started:
            return
        cause = tracking.check_tracker(run, self.runner, workdir=FreshRun(train_run.root / TRACK_RUN).make().work,
                                       log_file=workspace / "logs" / "tracker_check.log")
        if cause is not None:
            raise StepError(f"experiment tracker FT_REPORT_TO={run.report_to} cannot start: {cause}",
                            error_type=ErrorType.CONFIG, log_tail=cause,
                            suggestion=f"Install {run.report_to} in the tool env (`ftagent env setup`), fix its "
                                       "settings, or set FT_REPORT_TO=none; the training config is not the cause.",
                            details={"report_to": run.report_to})
        self._tracker_started = True

    def log_scores(self, model: TrainResult, validation: EvalResult | None, ctx: StepContext[SessionState] | None,
                   baseline: float | None = None) -> RunResult | None:
        """Add ftagent's validation score to the loop's tracker run (``FT_REPORT_TO``; no-op when off), from a
        fresh folder beside the training's (``train/loop_<n>/track``).

        A failure here is a warning, never a failed loop: the score is already in events and the report.
        """
        root = run_of_model(Path(model.output_dir)).root  # train/loop_<n>
        run = tracking.tracking_run(self.settings.ft.report_to, root, ctx)
        if run is None or validation is None or validation.score is None:
            return None
        step = max((int(p.get("step") or 0) for p in model.loss_history), default=0)
        scalars = tracking.score_scalars(validation.core_metric, validation.score, baseline)
        track = FreshRun(root / TRACK_RUN).make()
        return tracking.log_scores(run, scalars, step, self.runner, workdir=track.work,
                                   log_file=track.root / "track_scores.log")

    def train(self, code: CodeResult, report: ValidationReport, ctx: StepContext[SessionState] | None) -> TrainResult:
        """Train; return where the model is and its loss history.

        Raises:
            StepError: the run diverged (DIVERGED: stopped early, see :mod:`.early_stop`), failed
                (classified CONFIG/OOM/DATA/ENV/TIMEOUT) or left no model.
        """
        from ftagent.core.stage_specs import stage_spec
        from ftagent.tools.llamafactory.validation import start_mounts, start_path

        scenario = self.scenario
        stage = stage_spec(code.stage)
        workspace = Path(code.workspace).absolute()
        # what validation approved, frozen outside the workspace (issue 39 item 2); a trainer used on its own
        # (no workflow froze anything) runs the workspace's validated train.yaml
        approved = report.approved
        config_path = approved.config_path if approved is not None else Path(report.config_path or
                                                                             workspace / "train.yaml")
        config: dict[str, Any] = yaml.safe_load(config_path.read_text(encoding="utf-8")) or {}
        # the trainer's own fresh folder and read-only inputs; the workspace is never bound (red team B1, B2)
        sealed = Path(approved.data_dir) if approved is not None and approved.data is not None else None
        train_run = stage_training(workspace, config, sealed_data=sealed, data_format=stage.data)
        output_dir = train_run.output
        timeout = ctx.limit(self.settings.ft.full_timeout) if ctx else float(self.settings.ft.full_timeout)
        run = tracking.tracking_run(self.settings.ft.report_to, train_run.root, ctx)
        self._start_tracker(run, workspace, train_run)
        env = lf_env(train_run, {**system_env(scenario.hardware), **launch_env(scenario.hardware, config),
                                 **tracking.tracker_env(run)})
        watch = DivergenceWatch(EarlyStopRule.from_settings(self.settings.ft))
        # Ray's overrides are LLaMA-Factory's (a GRPO run is one process)
        extra = self._run_extra(run, watch.rule, env, ray=stage.trainer == "llamafactory")
        config_path = write_run_config(train_run, run_config(train_run, config, extra))
        mounts = train_run.mounts(*start_mounts(start_path(code, scenario), scenario), *tracking.tracker_mounts(run))
        stop = threading.Event()

        def on_each(point: dict[str, Any]) -> None:
            if watch.observe(point) is not None:
                stop.set()

        start = time.monotonic()
        log_file, gpus = workspace / "logs" / "train.log", visible_gpus(scenario.hardware)
        config = {**config, "output_dir": str(output_dir)}  # what is recorded: the validated config, where it wrote
        with TrainerLogFollower(output_dir, _progress_emitter(ctx), on_each=on_each, root=train_run.work):
            if stage.trainer == "trl":  # GRPO: TRL's trainer through ftagent's script, same runner and rules
                from ftagent.tools.trl.run import run_grpo

                if code.reward is None:
                    raise StepError("no reward for the GRPO stage", error_type=ErrorType.CONFIG)
                result = run_grpo(config_path, self.runner, reward=code.reward, workdir=train_run.work,
                                  mounts=mounts, env=env, timeout=timeout, log_file=log_file, gpus=gpus,
                                  stop=stop if accepts_stop(self.runner) else None)
            else:
                result = run_llamafactory("train", config_path, self.runner, workdir=train_run.work, mounts=mounts,
                                          env=env, timeout=timeout, log_file=log_file, gpus=gpus, stop=stop)
        train_run.drop_scratch()
        duration = time.monotonic() - start
        chain = [*(code.start.chain if code.start else []), stage.name]
        if watch.verdict is not None:
            kept = self._diverged(watch.verdict, result, output_dir, config, ctx, stopped=accepts_stop(self.runner))
            return kept.model_copy(update={"stage": stage.name, "chain": chain})
        if not result.ok:
            log = read_run_log(result)
            check_disk_full(log, "training", [train_run.root, scenario.file_path])  # stops the session, not the loop
            info = classify_failure(log, exit_code=result.exit_code,
                                    timed_out=result.timed_out, timeout_s=timeout)
            raise StepError(f"training failed: {info.message}", error_type=info.error_type, log_tail=info.log_tail,
                            suggestion=info.suggestion, details={"exit_code": result.exit_code})
        return _trained(output_dir, config, result, duration_s=round(duration, 2), stage=stage.name, chain=chain)


def _trained(output_dir: Path, config: dict[str, Any], result: RunResult, *, duration_s: float, stage: str,
             chain: list[str]) -> TrainResult:
    """The result of a run that exited 0: where its model is and its loss history (CONFIG when it saved none)."""
    kind = model_kind(output_dir)
    if kind is None:
        raise StepError(f"training exited 0 but {output_dir} holds no model or adapter",
                        error_type=ErrorType.CONFIG, log_tail=relevant_lines(read_run_log(result)),
                        suggestion="Do not change output_dir or saving options.")
    points, summary = read_loss_history(output_dir)
    return TrainResult(
        output_dir=str(output_dir),
        model_path=str(output_dir),
        adapter_of=str(config.get("model_name_or_path")) if kind == "lora" else None,
        finetuning_type=str(config.get("finetuning_type", "lora" if kind == "lora" else "full")),
        template=config.get("template"),
        enable_thinking=config.get("enable_thinking"),
        loss_history=[p.model_dump() for p in points],
        train_runtime_s=summary.get("train_runtime"),
        config=config,
        duration_s=duration_s,
        stage=stage,
        chain=chain,
    )


def _progress_emitter(ctx: StepContext[SessionState] | None):
    """``trainer_log.jsonl`` points → throttled ``progress`` events of the step (none without a context)."""
    from ftagent.engine.events import Progress

    def emit(point: dict[str, Any]) -> None:
        if ctx is not None:
            ctx.emit(Progress(phase="train", done=point.get("current_steps"), total=point.get("total_steps"),
                              detail=progress_detail(point)))

    return emit
