"""The integrity guard (issue 31 item 5): runs every check on each candidate before it may become SOTA.

Autonomous post-training agents have been seen training on the test set, editing the chat template,
swapping in another checkpoint and editing the evaluator. Each check below is a small function over files
on disk; :meth:`IntegrityGuard.check` runs them all on one experiment, the workflow's feedback step records
an ``integrity`` event with every verdict, and a flagged candidate cannot become SOTA (the one place:
:meth:`ftagent.finetune.workflow.FinetuneWorkflow.feedback`). The report lists the flags.

* ``tokenizer``, ``chat_template``, ``architecture``, ``decoding``, ``weights`` — the model files against the
  base's references recorded at the start (:mod:`ftagent.integrity.references`; the checks:
  :mod:`~ftagent.integrity.model_files`, :mod:`~ftagent.integrity.decoding`, :mod:`~ftagent.integrity.weights`,
  :mod:`~ftagent.integrity.lora`); the tokenizer, template and decoding files may also equal the validated
  micro-batch run's (its frozen copy, :func:`validated_runs`: what LLaMA-Factory wrote for the config the
  validator checked).
* ``benchmark_files`` — every file of the prepared benchmark folder (data, ``spec.json``,
  ``prepared.json``) and ftagent's evaluator sources (the scorers and the OpenCompass config renderer:
  ``ftagent/benchmarks``, ``ftagent/tools/opencompass``) hashed when the session's workflow is built (after
  the baseline, before any loop's generated code runs; a resumed session hashes again when it resumes)
  and compared before each decision.
* ``eval_config`` — each split's config digest (recorded when ftagent rendered it, cached results
  included) equals the baseline's recorded one, and a rendered config still on disk has its recorded digest
  (:mod:`ftagent.integrity.eval_config`).
* ``data_script`` — flagged by the sandbox's own record only (issue 39 item 7): the folders a data script
  must not read (benchmark items, the baseline's and every loop's saved predictions, the logs) are not
  mounted, and their decoys record every file opened or folder listed, outside the sandbox
  (:mod:`ftagent.runners.decoys`). A script whose text names the benchmark folder, or whose logs print a
  failed read of it, gets a warning in the detail, never a flag.
* ``contamination`` — the loop's ``data.json`` against the validation and test items: the exact/n-gram
  scan (:func:`ftagent.datasets.contamination.scan_rows`), the paraphrase scan
  (:func:`~ftagent.datasets.contamination.fuzzy_scan`) and the gold answers of
  ``contamination.ANSWER_MIN_TOKENS`` words or more copied into a row's output (``ANSWER_COVERAGE`` of their
  n-grams). The planner is told this rule by :func:`ftagent.datasets.contamination.rule_words`.
* ``constant_answers`` — the candidate's validation answers are not (nearly) all the same
  (:func:`ftagent.benchmarks.baselines.answers_nearly_constant`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ftagent.core.errors import UserInputError
from ftagent.core.trace import Experiment, Trace
from ftagent.core.types import ScenarioInfo
from ftagent.core.yamlio import load_yaml_text
from ftagent.engine.events import CheckVerdict
from ftagent.integrity import evaluation
from ftagent.integrity.decoding import decoding_check
from ftagent.integrity.eval_config import eval_config_check
from ftagent.integrity.evaluation import benchmark_files_check, constant_answers_check
from ftagent.integrity.hashing import tree_hashes
from ftagent.integrity.model_files import (
    ModelFiles,
    architecture_check,
    chat_template_check,
    read_model_files,
    tokenizer_check,
)
from ftagent.integrity.references import References, load_or_record
from ftagent.integrity.trained_run import trained_run
from ftagent.integrity.training_data import (
    DATA_FILE,
    benchmark_answers,
    benchmark_items,
    contamination_check,
    data_script_check,
    trained_system_texts,
)
from ftagent.integrity.verdict import IntegrityVerdict
from ftagent.integrity.weights import is_adapter, merged_check, weight_check

MODEL_CHECKS = ("tokenizer", "chat_template", "architecture", "decoding", "weights")
MERGED = "merged_model"  # where the evaluation merges an adapter it cannot serve (tools/opencompass/runs.py)


def validated_runs(experiment: Experiment, workspace: Path | None) -> list[Path]:
    """The validated micro-batch run's files: the frozen copy validation approved (outside the workspace,
    :attr:`ftagent.core.approved.Approved.validated_run`); else an explicit ``validated_output`` artefact;
    else, for a snapshot older than frozen approvals, ``<workspace>/debug/output``."""
    if experiment.approved is not None:
        return [experiment.approved.validated_run]
    art = experiment.artefacts
    if art.get("validated_output"):
        return [Path(art["validated_output"])]
    return [workspace / "debug" / "output"] if workspace is not None else []


def trained_config(experiment: Experiment) -> dict[str, Any]:
    """The train.yaml the candidate was trained with: the frozen copy validation approved (outside the workspace,
    hashed), else the experiment's record of it (a snapshot older than frozen approvals)."""
    if experiment.approved is not None:
        try:
            config = load_yaml_text(experiment.approved.config_path.read_text(encoding="utf-8"), "train.yaml")
        except (OSError, UserInputError):
            config = None
        if isinstance(config, dict):
            return config
    return dict(experiment.config)


def start_loop(experiment: Experiment, trace: Trace) -> Experiment | None:
    """The loop whose weights ``experiment`` trained from (its hypothesis's ``weights_from``), None: the base."""
    loop = experiment.hypothesis.weights_from if experiment.hypothesis is not None else None
    return trace.get(loop) if loop is not None else None


def start_flag(experiment: Experiment, parent: Experiment | None) -> str:
    """The ``weights`` flag of the weights ``experiment`` started from ("" for the base, or a clean parent)."""
    loop = experiment.hypothesis.weights_from if experiment.hypothesis is not None else None
    if loop is None:
        return ""
    if parent is None or parent.loop != loop:
        return f"loop {loop}'s verdict was not given to the guard"
    return next((f for f in parent.integrity_flags if f.startswith("weights")), "")


class IntegrityGuard:
    """Runs every check on one candidate; holds what the session's start recorded: the benchmark/evaluator
    hashes and the references (base model, baseline's evaluation configs)."""

    def __init__(self, scenario: ScenarioInfo, *, input_columns: list[str], answer_field: str = "answer",
                 references_file: Path, baseline_configs: dict[str, str]) -> None:
        self.base = Path(scenario.base_model_path)
        self.benchmark = scenario.benchmark
        self.file_path = Path(scenario.file_path or ".").absolute()
        self.data_dir = scenario.items_root() / scenario.benchmark  # the session's own frozen copy (issue 39.6)
        self.input_columns = input_columns
        self.answer_field = answer_field
        self.references_file = Path(references_file)
        self.baseline_configs = dict(baseline_configs)
        self.start_hashes: dict[str, str] | None = None
        self.references: References | None = None
        self._items: dict[str, list[str]] | None = None

    @classmethod
    def for_spec(cls, scenario: ScenarioInfo, spec: Any, *, references_file: Path,
                 baseline_configs: dict[str, str]) -> IntegrityGuard:
        """The session's guard: the resolved benchmark spec's input columns and gold field; its references
        kept in ``references_file`` (the session's folder); the baseline's config digests."""
        return cls(scenario, input_columns=list(spec.input_columns), answer_field=spec.output_column,
                   references_file=references_file, baseline_configs=baseline_configs)

    def watched(self) -> list[Path]:
        return [self.data_dir, *evaluation.evaluator_roots()]

    def hashes(self) -> dict[str, str]:
        return tree_hashes([self.data_dir]) | tree_hashes(evaluation.evaluator_roots(), suffixes=(".py", ".yaml", ".json"))

    def record_start(self) -> None:
        """Before generated code runs: hash the benchmark folder and the evaluator sources, and record the
        references (or read those the session's start recorded, on resume)."""
        if self.start_hashes is None:
            self.start_hashes = self.hashes()
        if self.references is None:
            self.references = load_or_record(self.references_file, self.base, self.baseline_configs)

    def _bench_items(self) -> dict[str, list[str]]:
        if self._items is None:
            try:
                self._items = benchmark_items(self.data_dir, self.input_columns)
            except Exception:  # noqa: BLE001 - an unreadable split file: the check says "no items"
                self._items = {}
        return self._items

    def model_checks(self, candidate: Path, validated: list[Path], output_dir: Path, *,
                     start: Path | None, config: dict[str, Any], parent_flag: str = "") -> list[CheckVerdict]:
        """The candidate's model files and weights against the references (the validated run's files are
        accepted where an honest trainer rewrites them); ``start``: the weights the system resolved for a loop
        that trains from an earlier loop's (None: from the base), which its adapter may name and its movement
        is measured from; ``config``: the validated train.yaml the candidate was trained with (its optimizer and
        schedule bound the weights); ``parent_flag``: the ``weights`` flag of the loop whose weights the run
        started from ("" when clean or none)."""
        refs = self.references
        if refs is None:
            return [CheckVerdict(name=n, passed=None, detail="no references recorded at the session start")
                    for n in MODEL_CHECKS]
        base, files = refs.files, read_model_files(candidate)
        allowed: list[ModelFiles] = [read_model_files(v) for v in validated if v.is_dir()]
        adapter = is_adapter(candidate)
        run = trained_run(config, candidate, base=self.base, start=start,
                          validated=[v for v in validated if v.is_dir()], parent_flag=parent_flag)
        weights = weight_check(refs.weights, candidate, run=run)
        merged = output_dir / "oc" / MERGED
        if adapter and weights.passed is not False and (merged / "config.json").exists():
            served = merged_check(refs.weights, merged, candidate, run=run)
            weights = served if served.passed is False else weights.model_copy(
                update={"detail": f"{weights.detail}; {served.detail}"})
        return [tokenizer_check(base, files, allowed), chat_template_check(base, files, allowed),
                architecture_check(base, files, allowed, start=start),
                decoding_check(base, files, allowed, adapter=adapter), weights]

    def check(self, experiment: Experiment, *, parent: Experiment | None = None) -> IntegrityVerdict:
        """Every check's verdict on ``experiment`` (a failed loop without a model: model checks skipped);
        ``parent``: the loop whose weights it trained from (its hypothesis's ``weights_from``; None: the base)."""
        started = time.monotonic()
        art = experiment.artefacts
        checks: list[CheckVerdict] = []
        model = art.get("model") or art.get("output_dir")
        workspace = Path(art["workspace"]) if art.get("workspace") else None
        approved = experiment.approved  # what validation approved, frozen outside the workspace (issue 39 item 2)
        if model and Path(model).is_dir():
            validated = validated_runs(experiment, workspace)
            start = art.get("start_weights")  # recorded by the workflow from the loop's StartModel (issue 40)
            checks += self.model_checks(Path(model), validated, Path(art.get("output_dir") or model),
                                        start=Path(start) if start else None, config=trained_config(experiment),
                                        parent_flag=start_flag(experiment, parent))
        checks.append(benchmark_files_check(self.start_hashes, self.hashes()))
        output_dir = art.get("output_dir") or model
        if output_dir or experiment.eval_configs:
            baseline = self.references.baseline_configs if self.references is not None else self.baseline_configs
            checks.append(eval_config_check(experiment.eval_configs, Path(output_dir) / "oc" if output_dir else None,
                                            baseline))
        if workspace is not None:
            # the script that ran (frozen before the debug run), the full data run's own folder (its log, its
            # recorded reads) and the data that trained; a loop from before the freeze kept all in its workspace
            data_file = approved.data_file if approved is not None and approved.data is not None else \
                workspace / DATA_FILE
            checks.append(data_script_check(
                workspace, self.data_dir, self.benchmark, code_dir=approved.code_dir if approved else None,
                data_run=Path(approved.data_dir) if approved is not None else None))
            checks.append(contamination_check(data_file, self._bench_items(),
                                              benchmark_answers(self.data_dir, self.answer_field),
                                              system_texts=trained_system_texts(experiment)))
        checks.append(constant_answers_check(experiment.val_answers))
        return IntegrityVerdict(checks=checks, seconds=time.monotonic() - started)
