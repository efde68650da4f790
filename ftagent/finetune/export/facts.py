"""What an export says about its model, collected from the session's events and its latest snapshot.

The scores, times, costs and the loss history come from ``events.jsonl`` through the one projection
(:func:`ftagent.views.session.load_session` and :func:`ftagent.views.report.build_report`); the
experiment DAG (parents, artefact paths, the trained config, rows) and the scenario come from the
latest snapshot's typed state. Nothing is re-parsed from raw logs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ftagent.core.errors import UserInputError
from ftagent.core.forgetting_rule import GuardResult
from ftagent.core.stats import Difference
from ftagent.core.trace import Experiment
from ftagent.core.types import ScenarioInfo
from ftagent.engine.session import list_snapshots
from ftagent.finetune.export.stages import StageStep, chain_words, stage_steps
from ftagent.finetune.state import FinetuneSessionState
from ftagent.views.layout import is_session_dir
from ftagent.views.report import build_report, llm_cost_text
from ftagent.views.session import load_session
from ftagent.views.session_view import LoopView, SessionView


class ChainStep(BaseModel):
    """One experiment on the path from the first ancestor to the exported loop."""

    loop: int
    hypothesis: str = ""
    reason: str = ""
    val_score: float | None = None
    decision: bool = False
    feedback: str = ""


class SplitScores(BaseModel):
    """Baseline and fine-tuned core-metric scores of one benchmark split."""

    split: str
    baseline: float | None = None
    finetuned: float | None = None
    vs_baseline: Difference | None = None  # this model − base model, paired 95 % interval (ftagent.core.stats)
    items: int | None = None  # items each score is over (None: as the interval says)
    note: str = ""  # the final evaluation's: "every item outside validation", "full equals test here: ..."


class ExportFacts(BaseModel):
    """Everything the card and ``reproduce/`` say, with the host paths they are built from."""

    session: str
    loop: int
    is_sota: bool
    benchmark: str
    core_metric: str = "score"
    base_model: str  # as the user named it
    base_model_path: str  # host folder (never written to the card)
    planner: str | None = None
    datasets: list[str] = Field(default_factory=list)
    dataset_root: str | None = None  # host folder of the raw datasets (FT_FILE_PATH/datasets)
    template: str | None = None
    finetuning_type: str = "full"
    model_path: str  # host folder: full model or LoRA adapter
    workspace: str  # host folder of the loop's files
    files: dict[str, str] = Field(default_factory=dict)  # logical name -> host path (process_data.py, train.yaml)
    config: dict[str, Any] = Field(default_factory=dict)  # the train.yaml that was trained
    data_rows: int | None = None
    loss_history: list[dict[str, Any]] = Field(default_factory=list)
    train_runtime_s: float | None = None
    scores: list[SplitScores] = Field(default_factory=list)
    constant_baseline: str = ""  # what one constant answer scores on validation (ftagent.benchmarks.baselines)
    forgetting: list[GuardResult] = Field(default_factory=list)  # the forgetting guard on this loop (issue 31.6)
    integrity: str = ""  # the integrity guard's verdict count on this loop ('' when it did not run; issue 31.5)
    chain: list[ChainStep] = Field(default_factory=list)
    stages: list[StageStep] = Field(default_factory=list)  # issue 40: the runs that made the weights, oldest first
    loop_duration_s: float = 0.0
    wall_time_s: float = 0.0
    training_time_s: float = 0.0
    evaluation_time_s: float = 0.0
    llm_calls: int = 0
    llm_cost_usd: float = 0.0
    llm_unpriced_calls: int = 0

    @property
    def llm_cost(self) -> str:
        """The LLM spend in the report's words (:func:`ftagent.views.report.llm_cost_text`)."""
        return llm_cost_text(self.llm_cost_usd, self.llm_unpriced_calls, self.llm_calls)

    @property
    def is_lora(self) -> bool:
        return self.finetuning_type == "lora"

    @property
    def staged(self) -> bool:
        """More than one SFT run: the weights come from a stage chain (issue 40)."""
        return len(self.stages) > 1 or any(s.stage != "sft" for s in self.stages)

    @property
    def stage_chain(self) -> str:
        """``sft (loop 0) → dpo (loop 2)``."""
        return chain_words(self.stages)

    def score(self, split: str, which: str) -> float | None:
        """The ``baseline`` or ``finetuned`` score of ``split`` (None when not measured)."""
        row = next((s for s in self.scores if s.split == split), None)
        return getattr(row, which) if row is not None else None


def load_state(session_dir: Path) -> FinetuneSessionState:
    """The latest readable snapshot of a session as its typed state.

    Raises:
        UserInputError: not a session directory, or no readable snapshot.
    """
    session_dir = Path(session_dir)
    if not session_dir.is_dir() or not is_session_dir(session_dir):
        raise UserInputError(f"{session_dir} is not a session directory (no events.jsonl or __session__/)")
    for snap in reversed(list_snapshots(session_dir)):
        try:
            return FinetuneSessionState.model_validate_json(snap.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
    raise UserInputError(f"{session_dir} has no readable snapshot: nothing to export")


NO_BEST_HINT = "pass --loop N to export one anyway"  # export's way to name another loop (eval has its own)


def pick_loop(view: SessionView, state: FinetuneSessionState, loop: int | None,
              no_best_hint: str = NO_BEST_HINT) -> Experiment:
    """The experiment to export: ``loop``, else the session's best (SOTA) loop.

    ``no_best_hint``: what the error says to do when there is no best loop (the caller's own option).

    Raises:
        UserInputError: no such loop, no SOTA to default to, or the loop left no model.
    """
    trace = state.trace
    if loop is None:
        if trace.sota_loop is None:
            raise UserInputError(f"no loop of {Path(view.dir).name} beat the baseline, so there is no best model; "
                                 + no_best_hint)
        loop = trace.sota_loop
    exp = trace.get(loop)
    if exp is None:
        known = ", ".join(str(e.loop) for e in trace.experiments) or "none"
        raise UserInputError(f"loop {loop} does not exist in {Path(view.dir).name} (finished loops: {known})")
    model = exp.artefacts.get("model")
    if not model:
        why = f": {exp.failure.summary()}" if exp.failure else ""
        raise UserInputError(f"loop {loop} has no model{why}"[:500])
    if not Path(model).is_dir():
        raise UserInputError(f"loop {loop}'s model folder {model} is gone (deleted or on another machine)")
    return exp


def _chain(state: FinetuneSessionState, view: SessionView, exp: Experiment) -> list[ChainStep]:
    """The exported experiment and its ancestors (oldest first), each with what the feedback said."""
    loops = {lp.index: lp for lp in view.loops}
    steps: list[ChainStep] = []
    seen: set[int] = set()
    current: Experiment | None = exp
    while current is not None and current.loop not in seen:
        seen.add(current.loop)
        hyp = current.hypothesis
        feedback = (loops.get(current.loop) or LoopView(index=current.loop)).feedback or {}
        steps.append(ChainStep(loop=current.loop, hypothesis=hyp.hypothesis if hyp else "",
                               reason=hyp.reason if hyp else "", val_score=current.val_score,
                               decision=current.decision, feedback=str(feedback.get("reason") or current.reason)))
        current = state.trace.get(current.parent) if current.parent is not None else None
    return list(reversed(steps))


def _integrity_line(checks: list[dict[str, Any]] | None) -> str:
    """'N checks, M flagged' of the loop's recorded integrity checks ('' when the guard did not run)."""
    if checks is None:
        return ""
    ran = [c for c in checks if c.get("passed") is not None]
    flagged = [str(c.get("name")) for c in ran if c.get("passed") is False]
    return (f"{len(ran)} checks, {len(flagged)} flagged"
            + (f" ({', '.join(flagged)})" if flagged else "")
            + (f", {len(checks) - len(ran)} not applicable" if len(checks) > len(ran) else ""))


def _constant_baseline(scenario: ScenarioInfo) -> str:
    """The constant-answer baseline's line ('' when the benchmark's validation split is not prepared here)."""
    from ftagent.planners.llm.brief_benchmark import constant_baseline_words

    try:
        from ftagent.benchmarks import get_benchmark

        return constant_baseline_words(scenario.file_path, get_benchmark(scenario.benchmark),
                                       holdout=getattr(scenario, "holdout", None))
    except Exception:  # noqa: BLE001 - a plug-in benchmark gone, a bad file: the card says less
        return ""


def collect_facts(session_dir: Path, loop: int | None = None, no_best_hint: str = NO_BEST_HINT) -> ExportFacts:
    """The facts of one loop's model (default: the best loop).

    Raises:
        UserInputError: see :func:`load_state` and :func:`pick_loop`.
    """
    session_dir = Path(session_dir)
    state = load_state(session_dir)
    view = load_session(session_dir)
    exp = pick_loop(view, state, loop, no_best_hint)
    scenario: ScenarioInfo | None = state.scenario
    if scenario is None:
        raise UserInputError(f"{session_dir.name} has no scenario in its snapshot: nothing to export")
    report = build_report(session_dir)
    lp = next((x for x in view.loops if x.index == exp.loop), LoopView(index=exp.loop))
    training = lp.training or {}
    config = dict(exp.config or training.get("config") or {})
    recorded = [Difference.model_validate(d) for d in lp.intervals] or list(exp.intervals)
    scores = [SplitScores(split=split, baseline=view.baseline.get(split),
                          finetuned=(lp.results.get(split) or {}).get("score",
                                                                      exp.val_score if split == "validation"
                                                                      else exp.test_score),
                          vs_baseline=next((d for d in recorded if d.split == split and d.against == "baseline"),
                                           None))
              for split in ("validation", "test")]
    final = report.final  # FT_FINAL_EVAL (issue 31.3): only when this loop is the session's best
    if final is not None and final.best_loop == exp.loop:
        scores.append(SplitScores(split=final.split, baseline=final.base_score, finetuned=final.best_score,
                                  vs_baseline=final.difference, items=final.items,
                                  note=final.note or ("every item outside validation" if final.split == "full" else
                                                      "the final evaluation (FT_FINAL_EVAL=split)")))
    return ExportFacts(
        session=session_dir.name, loop=exp.loop, is_sota=state.trace.sota_loop == exp.loop,
        benchmark=scenario.benchmark, core_metric=view.core_metric or scenario.core_metric,
        base_model=scenario.base_model, base_model_path=scenario.base_model_path, planner=view.planner,
        datasets=list(scenario.datasets), dataset_root=scenario.dataset_root, template=config.get("template") or scenario.model_info.template,
        finetuning_type=str(config.get("finetuning_type") or training.get("finetuning_type") or "full"),
        model_path=exp.artefacts["model"], workspace=exp.artefacts.get("workspace", ""),
        files={k: v for k, v in exp.artefacts.items() if k not in {"model", "output_dir", "workspace"}},
        config=config, data_rows=exp.data_rows,
        loss_history=list(exp.loss_history or training.get("loss_history") or []),
        train_runtime_s=training.get("train_runtime_s"), scores=scores, chain=_chain(state, view, exp),
        stages=stage_steps(state.trace, exp.loop),
        constant_baseline=_constant_baseline(scenario),
        forgetting=next((row.forgetting for row in report.loops if row.loop == exp.loop and row.forgetting), None)
        or list(exp.forgetting),
        integrity=_integrity_line(next((row.integrity for row in report.loops if row.loop == exp.loop), None)),
        loop_duration_s=(lp.end or {}).get("duration_s", 0.0), wall_time_s=report.wall_time_s,
        training_time_s=report.training_time_s, evaluation_time_s=report.evaluation_time_s,
        llm_calls=report.llm_calls, llm_cost_usd=report.llm_cost_usd, llm_unpriced_calls=report.llm_unpriced_calls,
    )
