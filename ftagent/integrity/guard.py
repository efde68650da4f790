"""The integrity guard (issue 31 item 5): runs every check on each candidate before it may become SOTA.

Autonomous post-training agents have been seen training on the test set, editing the chat template,
swapping in another checkpoint and editing the evaluator. Each check below is a small function over files
on disk; :meth:`IntegrityGuard.check` runs them all on one experiment, the workflow's feedback step records
an ``integrity`` event with every verdict, and a flagged candidate cannot become SOTA (the one place:
:meth:`ftagent.finetune.workflow.FinetuneWorkflow.feedback`). The report lists the flags.

* ``tokenizer``, ``chat_template``, ``architecture``, ``weights`` — the model files against the declared
  base (:mod:`ftagent.integrity.model_files`, :mod:`ftagent.integrity.weights`); the chat template may also equal the validated debug run's
  (its frozen copy, :attr:`ftagent.core.approved.Approved.validated_run`: what LLaMA-Factory wrote for the
  template the validator checked, copied out of the workspace when validation passed).
* ``benchmark_files`` — every file of the prepared benchmark folder (data, ``spec.json``,
  ``prepared.json``) and ftagent's evaluator sources (the scorers and the OpenCompass config renderer:
  ``ftagent/benchmarks``, ``ftagent/tools/opencompass``) hashed when the session's workflow is built (after
  the baseline, before any loop's generated code runs; a resumed session hashes again when it resumes)
  and compared before each decision.
* ``eval_config`` — the candidate's rendered OpenCompass config (``<output>/oc/oc_<splits>.py``) has the same
  datasets block (data files, prompts, evaluator, post-processor, answer caps: everything before
  ``models = [``) as the baseline's (``FT_FILE_PATH/baseline/<key>``); only the model may differ. Not
  applicable when either was not rendered (a cached evaluation) or they were rendered by different
  template versions (their first two lines).
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

from pathlib import Path
from typing import Any

from ftagent.core.paths import baseline_dir
from ftagent.core.trace import Experiment
from ftagent.core.types import ScenarioInfo
from ftagent.engine.events import CheckVerdict
from ftagent.integrity import evaluation
from ftagent.integrity.evaluation import benchmark_files_check, constant_answers_check, eval_config_check
from ftagent.integrity.hashing import tree_hashes
from ftagent.integrity.model_files import architecture_check, chat_template_check, tokenizer_check
from ftagent.integrity.training_data import (
    DATA_FILE,
    benchmark_answers,
    benchmark_items,
    contamination_check,
    data_script_check,
)
from ftagent.integrity.verdict import IntegrityVerdict
from ftagent.integrity.weights import weight_distance_check


class IntegrityGuard:
    """Runs every check on one candidate; holds the benchmark/evaluator hashes taken at the session start."""

    def __init__(self, scenario: ScenarioInfo, *, input_columns: list[str], answer_field: str = "answer") -> None:
        self.base = Path(scenario.base_model_path)
        self.benchmark = scenario.benchmark
        self.file_path = Path(scenario.file_path or ".").absolute()
        self.data_dir = scenario.items_root() / scenario.benchmark  # the session's own frozen copy (issue 39.6)
        self.input_columns = input_columns
        self.answer_field = answer_field
        self.start_hashes: dict[str, str] | None = None
        self._items: dict[str, list[str]] | None = None

    @classmethod
    def for_spec(cls, scenario: ScenarioInfo, spec: Any) -> IntegrityGuard:
        """The session's guard: the resolved benchmark spec's input columns and gold field."""
        return cls(scenario, input_columns=list(spec.input_columns), answer_field=spec.output_column)

    def watched(self) -> list[Path]:
        return [self.data_dir, *evaluation.evaluator_roots()]

    def hashes(self) -> dict[str, str]:
        return tree_hashes([self.data_dir]) | tree_hashes(evaluation.evaluator_roots(), suffixes=(".py", ".yaml", ".json"))

    def record_start(self) -> None:
        """Hash the benchmark folder and the evaluator sources (once; before generated code runs)."""
        if self.start_hashes is None:
            self.start_hashes = self.hashes()

    def _bench_items(self) -> dict[str, list[str]]:
        if self._items is None:
            try:
                self._items = benchmark_items(self.data_dir, self.input_columns)
            except Exception:  # noqa: BLE001 - an unreadable split file: the check says "no items"
                self._items = {}
        return self._items

    def check(self, experiment: Experiment) -> IntegrityVerdict:
        """Every check's verdict on ``experiment`` (a failed loop without a model: model checks skipped)."""
        art = experiment.artefacts
        checks: list[CheckVerdict] = []
        model = art.get("model") or art.get("output_dir")
        workspace = Path(art["workspace"]) if art.get("workspace") else None
        approved = experiment.approved  # what validation approved, frozen outside the workspace (issue 39 item 2)
        if model and Path(model).is_dir():
            cand = Path(model)
            validated = [approved.validated_run] if approved is not None else \
                [workspace / "debug" / "output"] if workspace is not None else []
            checks += [tokenizer_check(self.base, cand, validated), chat_template_check(self.base, cand, validated),
                       architecture_check(self.base, cand), weight_distance_check(self.base, cand)]
        checks.append(benchmark_files_check(self.start_hashes, self.hashes()))
        output_dir = art.get("output_dir") or model
        if output_dir:
            checks.append(eval_config_check(Path(output_dir) / "oc", baseline_dir(self.file_path, self.benchmark)))
        if workspace is not None:
            # the script that ran (frozen before the debug run), the full data run's own folder (its log, its
            # recorded reads) and the data that trained; a loop from before the freeze kept all in its workspace
            data_file = approved.data_file if approved is not None and approved.data is not None else \
                workspace / DATA_FILE
            checks.append(data_script_check(
                workspace, self.data_dir, self.benchmark, code_dir=approved.code_dir if approved else None,
                data_run=Path(approved.data_dir) if approved is not None else None))
            checks.append(contamination_check(data_file, self._bench_items(),
                                              benchmark_answers(self.data_dir, self.answer_field)))
        checks.append(constant_answers_check(experiment.val_answers))
        return IntegrityVerdict(checks=checks)
