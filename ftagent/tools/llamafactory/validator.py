"""The validate step: check the data, clean the config, prove it trains for a few steps.

:class:`LlamaFactoryValidator` (``FT_VALIDATOR`` default) runs four checks on a code-step workspace
and returns a :class:`ValidationReport` (never raises for the planner's mistakes, so the engine can
send the coder another round):

1. ``data.json`` is a list of valid Alpaca rows (DATA on failure);
2. ``train.yaml`` parses; unknown keys and wrong-shaped values are dropped and reported; the
   system-managed keys are injected and the result is written back (the original is kept as
   ``train.orig.yaml``) with the workspace ``dataset_info.json`` (CONFIG on failure);
   then the final train.yaml passes the launch preflight on the session's plan: transformers' and
   LLaMA-Factory's refusals of its keys on these GPUs and this DeepSpeed config (``load_best_model_at_end``
   with DeepSpeed, ``pure_bf16``/``auto_find_batch_size``/``predict_with_generate`` with ZeRO-3, GaLore/APOLLO
   with DeepSpeed ...; :mod:`ftagent.tools.launch.train_rules`, CONFIG on a refusal, in upstream's words)
   and trains with an optimizer whose steps the integrity guard can bound (:mod:`ftagent.integrity.movement`:
   ``adamw_torch``, ``adamw_torch_fused`` or ``adagrad``; no GaLore, APOLLO, BAdam, Adam-mini, Muon, PiSSA, OFT);
3. a planner-chosen ``template:`` must train the chat format evaluation will prompt with (rendered
   both ways by the real LLaMA-Factory in the tool env, :mod:`~ftagent.tools.llamafactory.template_check`;
   CONFIG on a mismatch, naming the templates that match);
4. a micro-batch run (a few optimizer steps on a few samples) must log at least one completed step
   with a finite loss; failures are classified CONFIG/OOM/DATA/ENV/TIMEOUT from the log. The weights
   it saves are removed afterwards (:mod:`~ftagent.tools.llamafactory.debug_output`).
"""

from __future__ import annotations

import json
import math
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ftagent.core.errors import ErrorType, UserInputError
from ftagent.core.paths import llama_factory_info_dir
from ftagent.core.stage_specs import stage_spec
from ftagent.core.types import CodeResult, ValidationReport
from ftagent.core.untrusted import UnsafeEntry, read_text
from ftagent.core.yamlio import load_yaml_text
from ftagent.runners.base import Runner
from ftagent.runners.fresh import FreshRun
from ftagent.tools.llamafactory.alpaca import describe
from ftagent.tools.llamafactory.catalogue import LFCatalogue, load_or_build_catalogue
from ftagent.tools.llamafactory.config import (
    DATA_FILE,
    dump_yaml,
    filter_config,
    load_lf_defaults,
    manage_config,
    micro_batch_config,
    system_env,
    write_dataset_info,
)
from ftagent.tools.llamafactory.debug_output import drop_weights
from ftagent.tools.llamafactory.launch import apply_deepspeed, launch_env, visible_gpus
from ftagent.tools.llamafactory.logs import (
    classify_failure,
    finite_loss_steps,
    read_loss_history,
    relevant_lines,
)
from ftagent.tools.llamafactory.preference import ROW_SHAPES, check_data
from ftagent.tools.llamafactory.stage_config import filter_stage_keys, stage_forced
from ftagent.tools.llamafactory.template_check import DATA_KEYS as TEMPLATE_DATA_KEYS
from ftagent.tools.llamafactory.template_check import (
    ProbeError,
    TemplateProbe,
    probe_template,
    template_mismatch,
)
from ftagent.tools.llamafactory.trainer import lf_env, read_run_log, run_llamafactory
from ftagent.tools.llamafactory.validation import (  # noqa: F401 - CONFIG_FILE, STAGE: this module's names too
    CONFIG_FILE,
    DEBUG_DIR,
    MANAGED_MARKER,
    MICRO_RUN,
    ORIGINAL_CONFIG,
    STAGE,
    VALIDATE_RUN,
    _fail,
    _managed_marker,
    _sha,
    config_changes,
    refuse_paths,
    refuse_unbounded,
    start_mounts,
    start_path,
)

if TYPE_CHECKING:
    from ftagent.core.settings import Settings
    from ftagent.core.types import ScenarioInfo
    from ftagent.engine.loop import StepContext
    from ftagent.engine.session import SessionState



class LlamaFactoryValidator:
    """Data check, key filtering + system-managed injection, micro-batch run."""

    def __init__(self, scenario: ScenarioInfo, settings: Settings, runner: Runner,
                 catalogue: LFCatalogue | None = None) -> None:
        self.scenario = scenario
        self.settings = settings
        self.runner = runner
        self._catalogue = catalogue
        self.defaults = load_lf_defaults()
        self._probes: dict[str, TemplateProbe] = {}  # the same template is probed once per session

    @property
    def catalogue(self) -> LFCatalogue:
        if self._catalogue is None:
            info_dir = self.scenario.llama_factory_info_dir or llama_factory_info_dir(self.settings.ft.file_path)
            self._catalogue = load_or_build_catalogue(Path(info_dir), self.runner)
        return self._catalogue

    def validate(self, code: CodeResult, ctx: StepContext[SessionState] | None) -> ValidationReport:
        """Run the four checks; the report's ``failure`` says what to fix when ``passed`` is False.

        The hypothesis's stage (``code.stage``, issue 40) decides the data format, the keys and the run: a
        LLaMA-Factory stage (sft, dpo, kto, orpo, simpo) as always; ``grpo`` through TRL
        (:mod:`ftagent.tools.trl.validate`). Every run starts from ``code.start`` (the system's start weights).
        """
        scenario = self.scenario
        workspace = Path(code.workspace).absolute()
        report = ValidationReport(passed=False)
        original = self._read_config(workspace, report)
        if original is None:
            return report
        stage = stage_spec(code.stage)
        data = check_data(workspace / DATA_FILE, stage.data, cutoff_len=_int(original.get("cutoff_len")))
        report.data_stats = {**data.model_dump(), "format": stage.data}
        if not data.ok:
            return _fail(report, ErrorType.DATA, f"data.json is not usable for stage {stage.name}: {describe(data)}",
                         suggestion=f"process_data.py must write {ROW_SHAPES[stage.data]}.",
                         details={"bad_examples": [b.model_dump() for b in data.bad_examples]})
        if stage.trainer == "trl":
            from ftagent.tools.trl.validate import validate_grpo

            validate_grpo(self, code, workspace, original, data.valid, ctx, report)
            return report
        final = self._build_config(workspace, original, scenario, data.valid, report, code)
        if not report.failure:
            self._check_launch(final, report)
        if not report.failure:
            refuse_unbounded(final, report)
        if not report.failure and final.get("template"):
            self._check_template(workspace, final, ctx, report)
        if not report.failure:
            self._micro_batch(workspace, final, ctx, report, start_path(code, scenario), stage.data)
        return report

    # --- steps -------------------------------------------------------------------------------------

    def _read_config(self, workspace: Path, report: ValidationReport) -> dict[str, Any] | None:
        path = workspace / CONFIG_FILE
        if not path.is_file():
            _fail(report, ErrorType.CONFIG, "train.yaml was not written", suggestion="Write train.yaml.")
            return None
        try:  # written in a folder sandboxed code can write: no link followed, at most 4 MB read (issue 39 item 1)
            text = read_text(workspace, CONFIG_FILE, limit=4 << 20)
        except UnsafeEntry as exc:
            _fail(report, ErrorType.CONFIG, f"train.yaml: {exc.strerror}", suggestion="Write train.yaml as a small "
                  "regular file.")
            return None
        try:  # the bounded loader of every input YAML: an alias bomb or a 1 MB file is a CONFIG error
            config = load_yaml_text(text, "train.yaml")
        except UserInputError as exc:
            _fail(report, ErrorType.CONFIG, str(exc).splitlines()[0], log_tail=str(exc)[-2000:],
                  suggestion="Write a flat YAML mapping of LLaMA-Factory keys.")
            return None
        if not isinstance(config, dict):
            _fail(report, ErrorType.CONFIG, f"train.yaml must be a mapping, got {type(config).__name__}",
                  suggestion="Write a flat YAML mapping of LLaMA-Factory keys.")
            return None
        if _managed_marker(workspace) == _sha(text) and (workspace / ORIGINAL_CONFIG).is_file():
            # train.yaml is our own output of an earlier validation: start again from the original.
            text = (workspace / ORIGINAL_CONFIG).read_text(encoding="utf-8")
            config = yaml.safe_load(text)
        else:
            (workspace / ORIGINAL_CONFIG).write_text(text, encoding="utf-8")
        return config

    def _build_config(self, workspace: Path, original: dict[str, Any], scenario: ScenarioInfo, n_samples: int,
                      report: ValidationReport, code: CodeResult) -> dict[str, Any]:
        stage = stage_spec(code.stage)
        kept, dropped = filter_config(original, self.catalogue, self.defaults)
        kept, off_stage = filter_stage_keys(kept, stage, self.catalogue)
        dropped += off_stage
        report.dropped_keys = [str(d) for d in dropped]
        if refuse_paths(original, dropped, report):
            return {}
        # warmup_ratio stays: the data here is the debug sample, so a step count from it would be wrong
        # (transformers turns the ratio into steps from the real run's step count)
        managed = manage_config(kept, workspace=workspace, base_model_path=start_path(code, scenario),
                                hardware=scenario.hardware, n_samples=n_samples, defaults=self.defaults,
                                keep_warmup_ratio=True, stage_keys=stage_forced(stage))
        managed.config, ds_notes = apply_deepspeed(managed.config, memory=scenario.memory,
                                                   hardware=scenario.hardware, workspace=workspace)
        managed.notes += ds_notes
        if managed.config.get("deepspeed") != kept.get("deepspeed"):
            managed.injected.append("deepspeed")  # the memory plan's DeepSpeed config (launch.py)
        report.injected_keys = managed.injected
        report.micro_batch["notes"] = managed.notes
        report.changes = config_changes(original, managed.config, dropped, managed.notes,
                                        bookkeeping=set(self.defaults.system_managed))
        template = managed.config.get("template")
        if template and self.catalogue.templates and template not in self.catalogue.templates:
            _fail(report, ErrorType.CONFIG, f"unknown chat template '{template}'",
                  suggestion=f"Use one of LLaMA-Factory's templates, e.g. {', '.join(self.catalogue.templates[:12])}.")
        final_path = dump_yaml(managed.config, workspace / CONFIG_FILE)
        (workspace / MANAGED_MARKER).write_text(_sha(final_path.read_text(encoding="utf-8")), encoding="utf-8")
        report.config_path = str(final_path)
        return managed.config

    def _check_launch(self, config: dict[str, Any], report: ValidationReport) -> None:
        """CONFIG failure when transformers or LLaMA-Factory would refuse this train.yaml on these GPUs
        (:func:`ftagent.tools.launch.preflight.train_config_verdicts`, issue 42 item 2): every validated
        train.yaml passes the same preflight, before the micro-batch (which forces some keys off)."""
        from ftagent.tools.launch.plan import LaunchPlan
        from ftagent.tools.launch.preflight import train_config_verdicts
        from ftagent.tools.launch.profiles import profile_of

        raw = self.scenario.launch_plan
        plan = LaunchPlan.model_validate(raw) if raw else None
        verdicts = train_config_verdicts(plan, config, gpus=profile_of(self.scenario.hardware))
        report.micro_batch.setdefault("notes", []).extend(
            f"{v.setting}: {v.message}" for v in verdicts if v.status == "warning")
        refused = [v for v in verdicts if v.status == "refused"]
        if refused:
            _fail(report, ErrorType.CONFIG, "train.yaml would be refused when the run starts: " + "; ".join(
                f"{v.setting}: {v.message} ({v.source})" for v in refused),
                suggestion="Change train.yaml: " + "; ".join(v.message.split("; ", 1)[-1] for v in refused),
                details={"preflight": [v.model_dump() for v in refused]})

    def _check_template(self, workspace: Path, config: dict[str, Any], ctx: StepContext[SessionState] | None,
                        report: ValidationReport) -> None:
        """CONFIG failure when ``template`` trains another format than evaluation prompts with."""
        key = json.dumps([self.scenario.base_model_path, config["template"],
                          {k: config.get(k) for k in TEMPLATE_DATA_KEYS}], sort_keys=True, default=str)
        probe = self._probes.get(key)
        if probe is None:
            timeout = float(self.settings.ft.micro_batch_timeout)
            try:
                probe = probe_template(Path(self.scenario.base_model_path), config, self.runner,
                                       FreshRun.beside(workspace, VALIDATE_RUN, "template").make().work,
                                       ctx.limit(timeout) if ctx else timeout)
            except ProbeError as exc:  # not the planner's fault: the micro-batch run shows the real error
                report.micro_batch.setdefault("notes", []).append(f"template check could not run: {exc}")
                return
            self._probes[key] = probe
        report.micro_batch["template_check"] = {"template": probe.template, "agrees": probe.agrees}
        mismatch = template_mismatch(probe)
        if mismatch:
            _fail(report, ErrorType.CONFIG, mismatch["message"], suggestion=mismatch["suggestion"],
                  details=mismatch["details"])

    def _micro_batch(self, workspace: Path, config: dict[str, Any], ctx: StepContext[SessionState] | None,
                     report: ValidationReport, start: str, data_format: str) -> None:
        """A few optimizer steps on the debug data, in a fresh folder beside the workspace
        (``validate/loop_<n>/micro``, :mod:`ftagent.runners.fresh`): the data script wrote the workspace, so the run
        reads copies of what was checked (the debug ``data.json``, copied without following a link) and binds no
        folder of the workspace; its log goes to ``debug/train_micro.log`` there (ftagent writes it)."""
        debug = workspace / DEBUG_DIR
        shutil.rmtree(debug, ignore_errors=True)  # an earlier round's log (rmtree never follows a link)
        debug.mkdir(parents=True)
        run = FreshRun.beside(workspace, VALIDATE_RUN, MICRO_RUN).make()
        try:
            run.stage_copy(workspace, DATA_FILE)
        except (OSError, UnsafeEntry) as exc:
            _fail(report, ErrorType.DATA, f"data.json: {exc.strerror or exc}", suggestion="Write data.json as a "
                  "regular file in the current directory.")
            return
        write_dataset_info(run.inputs, self.defaults.dataset_name, data_format=data_format)
        micro = {**micro_batch_config(config, run.work, self.defaults), "dataset_dir": str(run.inputs)}
        ds = micro.get("deepspeed")
        if isinstance(ds, str) and ds.strip():  # the memory plan's copy in the workspace (written by ftagent)
            micro["deepspeed"] = str(run.stage_copy(Path(ds).parent, Path(ds).name))
        path = dump_yaml(micro, run.inputs / "train_micro.yaml")
        timeout = float(self.settings.ft.micro_batch_timeout)
        timeout = ctx.limit(timeout) if ctx else timeout
        started = time.monotonic()
        hardware = self.scenario.hardware
        result = run_llamafactory("train", path, self.runner, workdir=run.work,
                                  mounts=run.mounts(*start_mounts(start, self.scenario)),
                                  env=lf_env(run, {**system_env(hardware, self.defaults), **launch_env(hardware, micro)}),
                                  timeout=timeout, log_file=debug / "train_micro.log", gpus=visible_gpus(hardware))
        run.drop_scratch()
        points, _ = read_loss_history(Path(micro["output_dir"]))
        good = finite_loss_steps(points)
        # the weights LLaMA-Factory always saves are read by nothing (a full copy per loop otherwise)
        freed = drop_weights(Path(micro["output_dir"]))
        report.micro_batch.update(
            config_path=str(path), output_dir=str(micro["output_dir"]), exit_code=result.exit_code,
            timed_out=result.timed_out,
            duration_s=round(time.monotonic() - started, 2), steps_logged=len(points),
            losses=[p.loss for p in points], log_file=str(debug / "train_micro.log"),
            weights_removed_mb=round(freed / 2**20, 1),
        )
        diverged = next((p for p in points if p.loss is not None and not math.isfinite(p.loss)), None)
        if result.ok and diverged is not None:  # the micro-batch is short: a NaN/Inf this early is the config's
            _fail(report, ErrorType.DIVERGED,
                  f"micro-batch run diverged at step {diverged.step}: loss {diverged.loss}, "
                  f"learning_rate {micro.get('learning_rate')} (losses {[p.loss for p in points]})",
                  log_tail=relevant_lines(read_run_log(result)),
                  suggestion="Lower learning_rate (by 10x or more), or add warmup; check the data for empty outputs.")
            return
        if result.ok and good:
            report.passed = True
            return
        log = read_run_log(result)
        if result.ok:
            _fail(report, ErrorType.CONFIG, "micro-batch run exited 0 but logged no step with a finite loss",
                  log_tail=relevant_lines(log), suggestion="Check learning_rate (NaN loss), cutoff_len and the data.")
            return
        info = classify_failure(log, exit_code=result.exit_code, timed_out=result.timed_out, timeout_s=timeout)
        _fail(report, info.error_type, f"micro-batch run failed: {info.message}", log_tail=info.log_tail,
              suggestion=info.suggestion, details={"exit_code": result.exit_code})


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
