"""The session's final evaluation (issue 31 item 3, ``FT_FINAL_EVAL``), run once after the last loop.

``full`` (default): the best model and the base model on every item outside validation (the prepared
``full`` split, :func:`ftagent.benchmarks.splits.final_indices`: test + the rows in neither split);
``split``: the test split the loops already scored (no new run); ``none``: nothing. Where the benchmark
has no item outside its two splits (the demo's 200 items: 100/100), ``full`` equals ``test`` and the
recorded test scores are used as they are (no run), which the result says.

The evaluation is the session's own (:func:`ftagent.tools.opencompass.runs.evaluate_splits_of_path`,
same cache: a second session of the same model scores nothing again); only the eval runner sees the
items. A failure is a warning: the loops' scores stand.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ftagent.core.errors import StepError
from ftagent.core.final_record import FINAL_FILE, FinalEvaluation
from ftagent.core.stats import load_items, paired_bootstrap
from ftagent.engine.events import Message, _Event
from ftagent.engine.session import write_atomic

if TYPE_CHECKING:
    from ftagent.core.settings import Settings
    from ftagent.core.trace import Experiment
    from ftagent.core.types import ScenarioInfo
    from ftagent.engine.session import Session
    from ftagent.finetune.resolve import ResolvedRun
    from ftagent.finetune.state import FinetuneSessionState
    from ftagent.runners.base import Runner


def _rows(path: Path) -> int:
    try:
        with path.open(encoding="utf-8") as fh:
            return sum(1 for line in fh if line.strip())
    except OSError:
        return 0


def extra_items(data_dir: Path) -> tuple[int, int]:
    """``(full items, test items)`` of a prepared benchmark folder (full − test = what a final run adds)."""
    return _rows(Path(data_dir) / "full.jsonl"), _rows(Path(data_dir) / "test.jsonl")


def _count(items_file: str | None) -> int:
    rec = load_items(items_file)
    return rec.count if rec else 0


def _best_model(exp: Experiment, scenario: ScenarioInfo) -> tuple[Path, Path | None, str | None]:
    """The best loop's model folder, the LoRA base it was evaluated on, its template."""
    from ftagent.tools.opencompass.merge import is_lora_adapter

    model = Path(exp.artefacts["model"])
    base = None
    if is_lora_adapter(model):
        base = Path(str(exp.config.get("model_name_or_path") or scenario.base_model_path))
    return model, base, exp.config.get("template")


def _evaluate_full(session: Session[FinetuneSessionState], settings: Settings, run: ResolvedRun, runner: Runner,
                   timeout: float | None) -> tuple[Any, Any]:
    """The base model's and the best model's ``full`` results (the best: None when there is none)."""
    from ftagent.core.paths import baseline_dir
    from ftagent.tools.opencompass.runs import evaluate_splits_of_path

    state = session.state
    scenario = state.scenario
    assert scenario is not None  # final_evaluation returns before this without one
    evaluate = partial(evaluate_splits_of_path, benchmark=run.adapter, splits=("full",), settings=settings,
                       runner=runner, timeout=timeout, gpu_count=scenario.hardware.gpu_count,
                       inference=run.model.inference, model_name=scenario.base_model,
                       items_root=scenario.items_root())
    base = evaluate(scenario.base_model_path, None,
                    work_dir=baseline_dir(settings.ft.file_path, run.benchmark)).require("full")
    exp = state.trace.sota()
    if exp is None or "model" not in exp.artefacts:
        return base, None
    model, base_path, template = _best_model(exp, scenario)
    work = Path(exp.artefacts.get("output_dir") or model) / "oc"
    best = evaluate(model, template, base_path=base_path, work_dir=work).require("full")
    return base, best


def final_evaluation(session: Session[FinetuneSessionState], settings: Settings, run: ResolvedRun, runner: Runner,
                     emit: Callable[[_Event], None], *, timeout: float | None = None) -> FinalEvaluation | None:
    """Run the final evaluation of ``FT_FINAL_EVAL``, write ``SESSION_DIR/final_eval.json`` and one message.

    Returns None for ``none`` or when it could not be run (a warning says why).
    """
    mode = getattr(settings.ft, "final_eval", "full")
    state = session.state
    trace, scenario = state.trace, state.scenario
    if mode == "none" or scenario is None:
        return None
    full_n, test_n = extra_items(scenario.items_root() / run.benchmark)
    exp = trace.sota()
    use_test = mode == "split" or full_n <= test_n
    note = ""
    if use_test:  # nothing to run: the loops' and the baseline's test results
        split = "test"
        base_score, base_items = trace.baseline_test, trace.baseline_test_items
        best_score, best_items = (exp.test_score, exp.test_items) if exp is not None else (None, None)
        if mode == "full":
            note = (f"full equals test here: {run.benchmark} has no item outside its validation and test splits"
                    if full_n == test_n else "the final set is the test split (FT_BENCHMARK_LIMIT or the benchmark's "
                    "own test file)")
    else:
        split = "full"
        emit(Message(text=f"final evaluation: the base model and the best model on {full_n} items "
                          f"(every item outside validation; {full_n - test_n} beyond the test split)"))
        try:
            base, best = _evaluate_full(session, settings, run, runner, timeout)
        except StepError as exc:
            emit(Message(level="warning", text=f"final evaluation failed: {exc}"[:500]))
            return None
        base_score, base_items = base.score, base.items_file
        best_score, best_items = (best.score, best.items_file) if best is not None else (None, None)
    if exp is None:  # no loop beat the baseline: the best model is the base model
        best_score, best_items = base_score, base_items
    diff = None
    if exp is not None:
        point = None if best_score is None or base_score is None else best_score - base_score
        diff = paired_bootstrap(load_items(best_items), load_items(base_items), against="baseline", split=split,
                                reference_name="the base model", diff=point)
    result = FinalEvaluation(mode=mode, split=split, items=_count(base_items) or (test_n if use_test else full_n),
                             test_items=test_n, note=note, benchmark=run.benchmark, core_metric=trace.core_metric or "",
                             base_score=base_score, best_loop=exp.loop if exp is not None else None,
                             best_score=best_score, difference=diff, base_items=base_items, best_items=best_items)
    # temp file + rename (issue 43): a full disk or a kill mid-write never leaves a half file as the result
    write_atomic(Path(session.dir) / FINAL_FILE, result.model_dump_json(indent=1))
    emit(Message(text=result.line()))
    return result
