"""``ftagent eval``: the session's parity-checked scoring for any model, with no session (issue 31 item 4).

A model is a folder (a full model, or a LoRA adapter whose ``adapter_config.json`` names a local
base), a base-model name (``builtin/<name>`` is built, an HF id downloaded: exactly as ``--base-model``),
or a session directory: its best loop's model, the exported folder when ``ftagent export`` wrote one,
else the trained output as the loop evaluated it (a LoRA adapter on its base; the evaluator merges it
for vLLM, as in the session). The benchmark, the base model's inference settings (models.yaml) and the
checks are the session's start-up (:func:`ftagent.finetune.start.start`); the evaluation is the
session's (:func:`ftagent.tools.opencompass.runs.evaluate_splits_of_path`, same evaluation cache), so a
model the session scored gets the numbers the session recorded.

The score's interval: a bootstrap over the items of the mean, stratified by sub-dataset like the score
(:func:`ftagent.core.stats.paired_bootstrap` of the model against an all-zero record of the same items:
the same resampling rule and seed as every interval of a session). ``--against`` scores a second model
on the same items and gives the paired difference.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from ftagent.core.errors import StepError, UserInputError
from ftagent.core.stats import Difference, ItemScores, load_items, paired_bootstrap
from ftagent.core.types import EvalResult

if TYPE_CHECKING:
    from ftagent.core.settings import Settings
    from ftagent.finetune.resolve import ResolvedModel, ResolvedRun
    from ftagent.runners.base import Runner

EVAL_SPLITS = ("validation", "test", "full")


class ModelRef(BaseModel):
    """What ``--model`` names, resolved to the folder that is evaluated."""

    given: str
    name: str = Field(description="the base model's name: its inference settings (models.yaml) and build")
    path: Path | None = Field(None, description="the folder evaluated (None: the named base model, built later)")
    base_path: Path | None = Field(None, description="a LoRA adapter's base model folder")
    template: str | None = None
    benchmark: str | None = Field(None, description="a session's benchmark (the default of --benchmark)")
    what: str = ""


class Score(BaseModel):
    """One model's score on one split, with its interval."""

    model: str
    what: str = ""
    score: float | None = None
    items: int = 0
    low: float | None = None
    high: float | None = None
    no_interval: str | None = None
    items_file: str | None = None
    run_dir: str | None = None

    def text(self) -> str:
        value = "none" if self.score is None else f"{self.score:.4g}"
        if self.low is not None and self.high is not None:
            return f"{value} [{self.low:.4g}, {self.high:.4g}] (95 % interval) on {self.items} items"
        return f"{value} on {self.items} items (no interval: {self.no_interval or 'unknown'})"


class EvalReport(BaseModel):
    """What ``ftagent eval`` prints and writes (``--json``, the output file)."""

    benchmark: str
    split: str
    core_metric: str
    model: Score
    against: Score | None = None
    difference: Difference | None = None  # model − against, paired on the same items


def _is_session(folder: Path) -> bool:
    return (folder / "events.jsonl").is_file() or (folder / "__session__").is_dir()


def _no_best_hint(folder: Path) -> str:
    """What ``eval`` can score instead of a session's best model: a loop's own model folder (``eval`` has no
    ``--loop``; issue 43: it suggested export's ``--loop N``)."""
    from ftagent.finetune.export.facts import load_state

    models = [(e.loop, e.artefacts.get("model")) for e in load_state(folder).trace.experiments]
    kept = [(loop, path) for loop, path in models if path and Path(path).is_dir()]
    if not kept:
        return "no loop left a model either: there is nothing to score"
    loop, path = kept[-1]
    return (f"to score a loop's model anyway pass its folder as --model (loop {loop}: --model {path}), "
            f"or export it with `ftagent export {folder} --loop {loop}`")


def _session_model(folder: Path) -> ModelRef:
    """The session's best model (UserInputError: no best model, or its folder is gone)."""
    from ftagent.finetune.export.bundle import default_target
    from ftagent.finetune.export.facts import collect_facts, load_state

    facts = collect_facts(folder, None, no_best_hint=_no_best_hint(folder))
    # a user benchmark YAML is registered in the session's process only: its file, as --path resumes it
    bench = (load_state(folder).config.get("run") or {}).get("benchmark_file") or facts.benchmark
    export = default_target(folder, facts.loop, adapter=False)
    if (export / "config.json").is_file():
        return ModelRef(given=str(folder), name=facts.base_model, path=export.absolute(), template=facts.template,
                        benchmark=bench, what=f"session {folder.name}, loop {facts.loop} (export {export})")
    base = Path(facts.base_model_path) if facts.is_lora else None
    return ModelRef(given=str(folder), name=facts.base_model, path=Path(facts.model_path), base_path=base,
                    template=facts.template, benchmark=bench,
                    what=f"session {folder.name}, loop {facts.loop} ({'LoRA adapter' if base else 'model'})")


def _adapter_base(folder: Path, option: str) -> Path:
    try:
        cfg = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserInputError(f"{option} {folder}: adapter_config.json cannot be read: {exc}") from exc
    base = Path(str(cfg.get("base_model_name_or_path") or "")).expanduser()
    if not str(base) or not (base / "config.json").is_file():
        raise UserInputError(f"{option} {folder} is a LoRA adapter whose base model ({base or 'none named'}) is not a "
                             "local model folder: merge it first (`ftagent export`) or evaluate its session directory")
    return base.absolute()


def resolve_model(given: str, option: str = "--model") -> ModelRef:
    """``--model`` (or ``--against``: ``option`` names it in errors) → :class:`ModelRef`, checking what can
    be checked without a tool.

    Raises:
        UserInputError: a missing folder, a folder that is no model, a session without a best model, weight
            files that are not whole.
    """
    text = given.strip()
    folder = Path(text).expanduser()
    if folder.is_dir():
        ref = _session_model(folder) if _is_session(folder) else _folder_model(folder, given, option)
        _check_whole(ref, option)
        return ref
    from ftagent.models.download import is_hub_id

    if not is_hub_id(text):  # Qwen/Qwen2.5-7B-Instruct is an id: its dots are a version, not a file suffix
        raise UserInputError(f"{option} {given}: no such folder (nor builtin/<name> or an HF repo id)")
    return ModelRef(given=given, name=text, what="base model")


def _check_whole(ref: ModelRef, option: str) -> None:
    """The weight files are whole (issue 43: a cut model.safetensors failed after a full OpenCompass run)."""
    from ftagent.models.checkpoint import checkpoint_problems

    for folder in (ref.path, ref.base_path):
        problems = checkpoint_problems(folder) if folder is not None else []
        if problems:
            raise UserInputError(f"{option} {ref.given}: the model in {folder} cannot be loaded: {'; '.join(problems)}")


def _folder_model(folder: Path, given: str, option: str) -> ModelRef:
    """A model folder or a LoRA adapter folder (UserInputError: neither)."""
    from ftagent.tools.opencompass.merge import is_lora_adapter

    if (folder / "config.json").is_file():
        return ModelRef(given=given, name=str(folder.absolute()), path=folder.absolute(), what="model folder")
    if is_lora_adapter(folder):
        base = _adapter_base(folder, option)
        return ModelRef(given=given, name=str(base), path=folder.absolute(), base_path=base, what="LoRA adapter")
    raise UserInputError(f"{option} {given}: the folder has no config.json or adapter files (a model folder, a "
                         "session directory, builtin/<name> or an HF repo id)")


def _zero(items: ItemScores) -> ItemScores:
    return items.model_copy(update={"items": {d: dict.fromkeys(v, 0.0) for d, v in items.items.items()}})


def score_of(ref: ModelRef, result: EvalResult, split: str) -> Score:
    """The score with the bootstrap interval of its mean (see the module docstring)."""
    items = load_items(result.items_file)
    interval = paired_bootstrap(items, _zero(items) if items else None, against="zero", split=split,
                                diff=result.score)
    score = result.score if interval.no_interval or interval.diff is None else interval.diff
    return Score(model=ref.given, what=ref.what, score=score, items=interval.items or (items.count if items else 0),
                 low=interval.low, high=interval.high, no_interval=interval.no_interval,
                 items_file=result.items_file, run_dir=result.run_dir)


def default_out(model: str, benchmark: str) -> Path:
    """``./ftagent-eval-<model>-<benchmark>.json`` (the model's last path part, made file-name safe)."""
    name = Path(model.rstrip("/")).name or "model"
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{name}-{Path(benchmark).stem}")
    return Path(f"ftagent-eval-{safe}.json")


def check_out(out: Path) -> None:
    """``--out`` can be written: not a folder, and its nearest existing parent is a writable folder (nothing
    is created here: an evaluation that fails leaves no empty folders behind).

    Raises:
        UserInputError: it cannot be written (exit 2, before any evaluation runs).
    """
    import os

    target = Path(out).expanduser().absolute()
    if target.is_dir():
        raise UserInputError(f"--out {out}: is a folder; name the JSON file to write (e.g. {Path(out) / 'eval.json'})")
    parent = target.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise UserInputError(f"--out {out}: its folder cannot be created: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserInputError(f"--out {out}: its folder cannot be created or written: {parent} is not writable")


def _evaluate(ref: ModelRef, model: ResolvedModel, run: ResolvedRun, split: str, settings: Settings,
              runner: Runner) -> EvalResult:
    """One model on one split through the session's evaluation (same cache, same checks). ``model`` is the
    start-up's resolution of ``ref.name`` (its folder and inference settings, computed once)."""
    from ftagent.core.hardware import detect_gpus
    from ftagent.core.paths import baseline_dir
    from ftagent.models.base_model import fetch_base_model
    from ftagent.tools.opencompass.runs import evaluate_splits_of_path

    ft = settings.ft
    file_path = Path(ft.file_path or ".").absolute()
    # builtin: built, HF id: downloaded, into the folder the start-up computed
    path = ref.path or fetch_base_model(model.name, model.path, runner, file_path)
    # a base model runs where the session's baseline runs; any other model in its own folder
    work = baseline_dir(file_path, run.benchmark) if ref.path is None else \
        file_path / "eval" / default_out(ref.given, run.benchmark).stem
    out = evaluate_splits_of_path(path, ref.template, benchmark=run.adapter, splits=(split,), settings=settings,
                                  runner=runner, work_dir=work, base_path=ref.base_path, model_name=ref.name,
                                  timeout=ft.benchmark_timeout_s, gpu_count=detect_gpus().gpu_count,
                                  inference=model.inference)
    return out.require(split)


def run_eval(model: str, benchmark: str | None, split: str = "test", against: str | None = None,
             make_runner: Callable[[], Runner] | None = None) -> EvalReport:
    """Score ``model`` (and ``against``) on ``split`` of ``benchmark``.

    Args:
        make_runner: builds the runner once every input is checked (default: the settings' runner).

    Raises:
        UserInputError: a bad model, benchmark or split (exit 2), before anything runs.
        EnvironmentFailure / StepError: the tool env, a build or download, or the evaluation failed.
    """
    from ftagent.finetune.resolve import resolved_model
    from ftagent.finetune.start import start
    from ftagent.models.base_model import check_base_model

    if split not in EVAL_SPLITS:
        raise UserInputError(f"--split {split}: one of {', '.join(EVAL_SPLITS)}")
    ref = resolve_model(model)
    other = resolve_model(against, "--against") if against else None
    bench = benchmark or ref.benchmark or (other.benchmark if other else None)
    if not bench:
        raise UserInputError("no benchmark: pass --benchmark KEY|FILE (a session directory as --model names its own)")
    startup = start(benchmark=bench, base_model=ref.name, file_settings={}, check_datasets=False, check_data=True)
    settings, run = startup.settings, startup.run  # the session's checks and look-ups
    against_model = None
    if other is not None:
        check_base_model(other.name, settings.ft.file_path)
        against_model = resolved_model(other.name, Path(settings.ft.file_path or ".").absolute())
    if make_runner is None:
        from ftagent.runners.factory import get_runner

        def make_runner() -> Runner:
            return get_runner(settings)
    runner = make_runner()
    first = _refusing_misfits(lambda: _evaluate(ref, run.model, run, split, settings, runner), "--model", model)
    report = EvalReport(benchmark=run.benchmark, split=split, core_metric=first.core_metric,
                        model=score_of(ref, first, split))
    if other is not None and against_model is not None:
        second = _refusing_misfits(lambda: _evaluate(other, against_model, run, split, settings, runner),
                                   "--against", other.given)
        report.against = score_of(other, second, split)
        report.difference = paired_bootstrap(load_items(first.items_file), load_items(second.items_file),
                                             against=other.given, split=split, reference_name=other.given,
                                             diff=None if first.score is None or second.score is None
                                             else first.score - second.score)
    return report


def _refusing_misfits(evaluate: Callable[[], EvalResult], option: str, given: str) -> EvalResult:
    """``evaluate()``; weights that do not fit their config (found before any OpenCompass run:
    :mod:`ftagent.tools.opencompass.weights`) are bad input here (exit 2), not an evaluation failure."""
    try:
        return evaluate()
    except StepError as exc:
        if not exc.details.get("weights_misfit"):
            raise
        raise UserInputError(f"{option} {given}: {exc.message}") from None


def report_lines(report: EvalReport) -> list[str]:
    """The lines ``ftagent eval`` prints."""
    lines = [f"{report.benchmark} / {report.split} ({report.core_metric}):",
             f"  {report.model.model}: {report.model.text()}"]
    if report.against is not None:
        lines.append(f"  {report.against.model}: {report.against.text()}")
    if report.difference is not None:
        lines.append(f"  difference (model − against, paired on the same items): {report.difference.text()}")
    return lines
