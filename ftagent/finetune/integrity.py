"""The integrity guard (issue 31 item 5): checks every candidate before it may become SOTA.

Autonomous post-training agents have been seen training on the test set, editing the chat template,
swapping in another checkpoint and editing the evaluator. Each check below is a small function over files
on disk; :meth:`IntegrityGuard.check` runs them all on one experiment, the workflow's feedback step records
an ``integrity`` event with every verdict, and a flagged candidate cannot become SOTA (the one place:
:meth:`ftagent.finetune.workflow.FinetuneWorkflow.feedback`). The report lists the flags.

* ``tokenizer``, ``chat_template``, ``architecture``, ``weights`` — the model files against the declared
  base (:mod:`ftagent.models.integrity`); the chat template may also equal the validated debug run's
  (``<workspace>/debug/output``: what LLaMA-Factory wrote for the template the validator checked).
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
* ``data_script`` — the generated data script must not name the benchmark folder (its absolute path, or
  ``benchmarks/<key>``), and its logs must not show a denied read of it: the sandbox does not mount that
  folder, so an attempt ends as "No such file or directory" / "Permission denied" naming it (recorded and
  flagged even when the script caught the error).
* ``contamination`` — the loop's ``data.json`` against the validation and test items: the exact/n-gram
  scan (:func:`ftagent.datasets.contamination.scan_rows`), the paraphrase scan
  (:func:`~ftagent.datasets.contamination.fuzzy_scan`) and the gold answers of
  ``contamination.ANSWER_MIN_TOKENS`` words or more copied into a row's output (``ANSWER_COVERAGE`` of their
  n-grams). The planner is told this rule by :func:`ftagent.datasets.contamination.rule_words`.
* ``constant_answers`` — the candidate's validation answers are not (nearly) all the same
  (:func:`ftagent.benchmarks.baselines.answers_nearly_constant`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import ftagent
from ftagent.benchmarks.baselines import answers_nearly_constant
from ftagent.core.integrity import IntegrityCheck, IntegrityVerdict, changed_files, tree_hashes
from ftagent.core.paths import baseline_dir, benchmark_data_dir
from ftagent.core.trace import Experiment
from ftagent.core.types import AnswerProfile, ScenarioInfo
from ftagent.models.integrity import (
    architecture_check,
    chat_template_check,
    tokenizer_check,
    weight_distance_check,
)

DATA_SCRIPT = "process_data.py"
DATA_FILE = "data.json"
_DENIED = re.compile(r"No such file or directory|Permission denied|Read-only file system")
#: ftagent's own scorers and evaluation-config renderer (package-relative), hashed with the benchmark data
EVALUATOR_SOURCES = ("benchmarks", "tools/opencompass")


def evaluator_roots() -> list[Path]:
    root = Path(ftagent.__file__).parent
    return [root / rel for rel in EVALUATOR_SOURCES]


def benchmark_files_check(before: dict[str, str] | None, after: dict[str, str]) -> IntegrityCheck:
    """Nothing added, removed or edited in the benchmark folder and the evaluator sources."""
    if before is None:
        return IntegrityCheck(name="benchmark_files", passed=None, detail="no hashes recorded at the session start")
    changed = changed_files(before, after)
    if changed:
        shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
        return IntegrityCheck(name="benchmark_files", passed=False, detail=f"changed since the session started: {shown}")
    return IntegrityCheck(name="benchmark_files", passed=True,
                          detail=f"{len(after)} benchmark and evaluator files unchanged since the session started")


def _datasets_block(path: Path) -> tuple[str, str]:
    """(the header lines, the config up to ``models = [``) of a rendered OpenCompass config."""
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.splitlines()
    return "\n".join(lines[:2]), text.split("\nmodels = [", 1)[0]


def eval_config_check(candidate_oc: Path, baseline_oc: Path) -> IntegrityCheck:
    """The candidate was scored with the baseline's datasets, prompts and evaluators (see the module doc)."""
    compared, differs = 0, []
    for cfg in sorted(Path(candidate_oc).glob("oc_*.py")):
        ref = Path(baseline_oc) / cfg.name
        if not ref.is_file():
            continue
        (c_head, c_body), (r_head, r_body) = _datasets_block(cfg), _datasets_block(ref)
        if c_head != r_head:  # another template version (ftagent upgraded since a cached baseline)
            continue
        compared += 1
        if c_body != r_body:
            differs.append(cfg.name)
    if differs:
        return IntegrityCheck(name="eval_config", passed=False,
                              detail=f"{', '.join(differs)}: datasets, prompts or evaluators differ from the baseline's")
    if not compared:
        return IntegrityCheck(name="eval_config", passed=None, detail="no rendered config to compare (cached)")
    return IntegrityCheck(name="eval_config", passed=True,
                          detail=f"{compared} rendered evaluation config(s) equal the baseline's but for the model")


def data_script_check(workspace: Path, data_dir: Path, benchmark: str) -> IntegrityCheck:
    """The data script neither names the benchmark folder nor tried to read it (its logs)."""
    workspace, data_dir = Path(workspace), Path(data_dir)
    script = workspace / DATA_SCRIPT
    if not script.is_file():
        return IntegrityCheck(name="data_script", passed=None, detail="no generated data script")
    text = script.read_text(encoding="utf-8", errors="replace")
    named = re.compile(re.escape(str(data_dir)) + "|" + re.escape(str(data_dir.parent)) + "|benchmarks['\"]?\\s*"
                       r"[,/+]\s*(?:os\.sep\s*\+\s*)?['\"/]?" + re.escape(benchmark) + r"\b")
    found = named.search(text)
    if found:
        return IntegrityCheck(name="data_script", passed=False,
                              detail=f"{DATA_SCRIPT} names the benchmark folder ({found.group(0)!r})")
    for log in sorted((workspace / "logs").glob("process_data*.log")):
        for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
            if _DENIED.search(line) and (str(data_dir) in line or f"benchmarks/{benchmark}" in line):
                return IntegrityCheck(name="data_script", passed=False,
                                      detail=f"{log.name}: a read of the benchmark folder was denied")
    return IntegrityCheck(name="data_script", passed=True,
                          detail=f"{DATA_SCRIPT} neither names nor tried to read the benchmark folder")


def _read_rows(path: Path) -> list[dict[str, Any]] | None:
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else None


def benchmark_answers(data_dir: Path, answer_field: str = "answer") -> dict[str, str]:
    """The gold answers of the validation and test items, keyed like ``benchmark_items``."""
    from ftagent.benchmarks.base import read_jsonl

    out: dict[str, str] = {}
    for split in ("validation", "test"):
        for path in sorted(Path(data_dir).glob(f"**/{split}.jsonl")):
            for i, row in enumerate(read_jsonl(path)):
                out[f"{path.parent.name}/{split}:{i}"] = str(row.get(answer_field) or "")
    return out


def contamination_check(data_file: Path, items: dict[str, list[str]], answers: dict[str, str]) -> IntegrityCheck:
    """The loop's training rows hold no validation/test item: copied, paraphrased, or its answer copied."""
    from ftagent.datasets.contamination import (
        ANSWER_COVERAGE,
        ANSWER_MIN_TOKENS,
        fuzzy_scan,
        normalise,
        scan_rows,
    )

    rows = _read_rows(Path(data_file))
    if rows is None:
        return IntegrityCheck(name="contamination", passed=None, detail=f"no readable {Path(data_file).name}")
    if not items:
        return IntegrityCheck(name="contamination", passed=None, detail="no benchmark items to compare")
    exact = scan_rows(rows, items)
    fuzzy = fuzzy_scan(rows, items)
    long_answers = {k: v for k, v in answers.items() if len(normalise(v)) >= ANSWER_MIN_TOKENS}
    copied = scan_rows([{"output": r.get("output")} for r in rows], long_answers,
                       min_coverage=ANSWER_COVERAGE) \
        if long_answers else None
    parts = [(exact, "hold items"), (fuzzy, "paraphrase items"), (copied, "copy gold answers")]
    found = [f"{rep.flagged_rows} rows {what} (e.g. row {rep.flagged[0].row_index} ~ {rep.flagged[0].item_id})"
             for rep, what in parts if rep is not None and rep.flagged]
    if found:
        return IntegrityCheck(name="contamination", passed=False, detail="; ".join(found))
    return IntegrityCheck(name="contamination", passed=True,
                          detail=f"{len(rows):,} rows vs {len(items):,} items: none copied, paraphrased or "
                                 f"answer-copied")


def profile_predictions(profile: AnswerProfile) -> list[str]:
    """The answers an :class:`AnswerProfile` stands for: its repeated answers with their counts, every other
    answer distinct (the profile keeps only the repeated ones)."""
    repeated = [answer for answer, n in profile.top.items() for _ in range(n)]
    return repeated + [f"\x00distinct {i}" for i in range(max(0, profile.items - len(repeated)))]


def constant_answers_check(profile: AnswerProfile | None) -> IntegrityCheck:
    if profile is None or not profile.items:
        return IntegrityCheck(name="constant_answers", passed=None, detail="no validation answers read")
    flagged = answers_nearly_constant(profile_predictions(profile))
    top = max(profile.top.values(), default=1)
    return IntegrityCheck(name="constant_answers", passed=not flagged,
                          detail=f"the most frequent answer is {top} of {profile.items}"
                                 + (" (nearly constant)" if flagged else ""))


class IntegrityGuard:
    """Runs every check on one candidate; holds the benchmark/evaluator hashes taken at the session start."""

    def __init__(self, scenario: ScenarioInfo, *, input_columns: list[str], answer_field: str = "answer") -> None:
        self.base = Path(scenario.base_model_path)
        self.benchmark = scenario.benchmark
        self.file_path = Path(scenario.file_path or ".").absolute()
        self.data_dir = benchmark_data_dir(self.file_path, scenario.benchmark)
        self.input_columns = input_columns
        self.answer_field = answer_field
        self.start_hashes: dict[str, str] | None = None
        self._items: dict[str, list[str]] | None = None

    @classmethod
    def for_spec(cls, scenario: ScenarioInfo, spec: Any) -> IntegrityGuard:
        """The session's guard: the resolved benchmark spec's input columns and gold field."""
        return cls(scenario, input_columns=list(spec.input_columns), answer_field=spec.output_column)

    def watched(self) -> list[Path]:
        return [self.data_dir, *evaluator_roots()]

    def hashes(self) -> dict[str, str]:
        return tree_hashes([self.data_dir]) | tree_hashes(evaluator_roots(), suffixes=(".py", ".yaml", ".json"))

    def record_start(self) -> None:
        """Hash the benchmark folder and the evaluator sources (once; before generated code runs)."""
        if self.start_hashes is None:
            self.start_hashes = self.hashes()

    def _bench_items(self) -> dict[str, list[str]]:
        if self._items is None:
            from ftagent.tools.llamafactory.data_script import benchmark_items_for

            try:
                self._items = benchmark_items_for(self.benchmark, self.file_path, self.input_columns)
            except Exception:  # noqa: BLE001 - an unknown benchmark key: the check says "no items"
                self._items = {}
        return self._items

    def check(self, experiment: Experiment) -> IntegrityVerdict:
        """Every check's verdict on ``experiment`` (a failed loop without a model: model checks skipped)."""
        art = experiment.artefacts
        checks: list[IntegrityCheck] = []
        model = art.get("model") or art.get("output_dir")
        workspace = Path(art["workspace"]) if art.get("workspace") else None
        if model and Path(model).is_dir():
            cand = Path(model)
            validated = [workspace / "debug" / "output"] if workspace is not None else []
            checks += [tokenizer_check(self.base, cand, validated), chat_template_check(self.base, cand, validated),
                       architecture_check(self.base, cand), weight_distance_check(self.base, cand)]
        checks.append(benchmark_files_check(self.start_hashes, self.hashes()))
        output_dir = art.get("output_dir") or model
        if output_dir:
            checks.append(eval_config_check(Path(output_dir) / "oc", baseline_dir(self.file_path, self.benchmark)))
        if workspace is not None:
            checks.append(data_script_check(workspace, self.data_dir, self.benchmark))
            checks.append(contamination_check(workspace / DATA_FILE, self._bench_items(),
                                              benchmark_answers(self.data_dir, self.answer_field)))
        checks.append(constant_answers_check(experiment.val_answers))
        return IntegrityVerdict(checks=checks)
