"""Trivial baselines: what one constant answer scores, and whether a model's answers are (nearly) constant.

On the real files a constant answer scores high on some sub-tasks (ChemCoTBench ``fg_count`` "1":
90 %, ``mol_opt`` "benzene": 78.7 %, ``ring_system_scaffold`` "Yes": 63-70 %), so a base model's
score, or a gain, means little without it (issue 31 item 7).

* :func:`constant_answer_baseline` — the constant answer of a prepared split, and the benchmark's headline
  (the plain mean over sub-datasets, as every headline here). **The constant is chosen on the choice rows
  only** (:func:`choice_rows`: validation's feedback part, the part the planner may be shown; the whole
  validation split where the session has no such part) and then scored as it is on the split asked for, so
  the test split's number never saw the test answers (issue 43: FinanceIQ's best letter per subject, chosen
  after seeing each split's answers, scored 29.5/31.8 where the best single letter scores 25.8/29.3). The
  line says which constant it is.
  Domain families: per sub-task, the best of :func:`~ftagent.benchmarks.constant_candidates.candidates` on
  the choice rows, scored by the benchmark's own scorer
  (:func:`ftagent.benchmarks.domain.evaluate_subtask`, what ``DomainEvaluator`` runs). Benchmarks scored in
  the tool env (OpenCompass): one constant for the whole benchmark, the most frequent gold answer of the
  choice rows; its score is its share of each sub-dataset's golds. Code benchmarks: a program whose answer
  equals everything (``__eq__`` always true), run against the tests by the benchmark's own evaluator
  (``program_score``, given by the caller that can reach the tool env); plain asserts let it pass.
* :func:`stored_constant_baseline` — the same, computed once per prepared split, choice rows and scoring
  rules (in the evaluation cache folder), for the brief, the report and the card.
* :func:`answers_nearly_constant` — a guard's check that a candidate's answers are (nearly) all the same.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ftagent.benchmarks.base import read_jsonl
from ftagent.benchmarks.components import SCORING_VERSION
from ftagent.engine.events import ConstantAnswer

_SKIP_SUBTASKS = {("tablebench", "visualization")}  # answers are chart programs run in a sandbox
ALWAYS_EQUAL = "a program whose answer equals everything (__eq__ always true)"
#: ``program_score(bench, root, split) -> {sub-dataset: (passed, items)}`` (None: cannot run here)
ProgramScore = Callable[[Any, Path, str], "dict[str, tuple[int, int]] | None"]


GOLD_SHARE = "most frequent gold answer, its share of the items"
BEST_CONSTANT = "best constant, scored by the benchmark's own scorer"


class SubsetBaseline(BaseModel):
    """The constant answer of one sub-dataset and what it scores there."""

    answer: str | None = Field(description="the constant output (as written to the scorer); None: none")
    rule: str = Field(default="", description="what the constant is, in words: always 'B', always the first choice")
    score: float | None = Field(description="its core metric on the split (None: not computable)")
    metric: str
    items: int


class ConstantBaseline(BaseModel):
    """The constant-answer baseline of one benchmark split (see the module docstring)."""

    benchmark: str
    split: str
    score: float | None = Field(description="the headline: mean of the sub-datasets' constant scores")
    metric: str
    method: str = Field(description="how the constants were scored (the benchmark's own scorer, or gold share)")
    chosen_on: str = Field(default="", description="the rows the constant was chosen on")
    choice: str = Field(default="", description="which feedback part that was (its seed and share: the cache's key, "
                                                "never shown: a planner read 'share 0.7' as the answer's share)")
    subsets: dict[str, SubsetBaseline] = Field(default_factory=dict)
    scoring: str = SCORING_VERSION
    data: str = ""  # digest of the split's file (a re-prepared split is computed again)

    def top(self, n: int = 3) -> list[tuple[str, SubsetBaseline]]:
        """The ``n`` sub-datasets where a constant answer scores most."""
        scored = [(k, v) for k, v in self.subsets.items() if v.score is not None]
        return sorted(scored, key=lambda kv: -float(kv[1].score or 0.0))[:n]

    def facts(self) -> ConstantAnswer | None:
        """The event's record of it (on the base model's ``benchmark_result``; None: not computable)."""
        if self.score is None:
            return None
        return ConstantAnswer(score=self.score, metric=self.metric, method=self.method, line=self.line(),
                              answers={k: v.rule or str(v.answer) for k, v in self.top()})

    def line(self) -> str:
        """One line for the brief, report and card: the score, which constant it is, where it was chosen."""
        if self.score is None:
            return f"constant-answer baseline: not computable ({self.method})"
        rules = {v.rule for v in self.subsets.values() if v.rule}
        if len(rules) == 1:
            what = f": {rules.pop()}"
        else:
            what = " (best sub-datasets: " + "; ".join(f"{k}: {v.rule or v.answer} scores {v.score:.1f}"
                                                     for k, v in self.top()) + ")"
        items = sum(v.items for v in self.subsets.values())
        size = f" ({items:,} items)" if items else ""
        # relay round r2: "chosen on validation's feedback part (12 items; seed 39005, share 0.7) [most frequent gold
        # answer, its share of the items]" read as if 0.7 were the answer's share: the method is said in words
        if self.method == GOLD_SHARE and self.chosen_on:
            how = f", the gold answer met most often on {self.chosen_on}"
        elif self.method == GOLD_SHARE:
            how = ", the gold answer met most often"
        elif self.method == BEST_CONSTANT and self.chosen_on:
            how = f", the best constant on {self.chosen_on}, scored by the benchmark's own scorer"
        else:
            how = (f", chosen on {self.chosen_on}" if self.chosen_on else "") + f"; {self.method}"
        return f"a constant answer scores {self.score:.1f} {self.metric} on the {self.split} split{size}{what}{how}"


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def subset_rows(bench: Any, root: Path, split: str) -> dict[str, list[dict[str, Any]]]:
    """The prepared rows of ``split`` per sub-dataset (the files OpenCompass reads; row ``i`` is item id ``i``)."""
    folder = _folder(bench, root)
    out: dict[str, list[dict[str, Any]]] = {}
    for subset in bench.spec.subsets:
        path = folder / split / f"{subset}.jsonl"
        if path.is_file() and path.stat().st_size:
            out[subset] = read_jsonl(path)
    if not out:  # a plug-in adapter that writes only the merged file
        for row in bench.load_items(root, split):
            out.setdefault(str(row.get("subset") or bench.spec.key), []).append(row)
    return out


def choice_rows(bench: Any, root: Path, holdout: Any = None) -> tuple[dict[str, list[dict[str, Any]]], str]:
    """The rows a constant is chosen on, per sub-dataset, and their name: validation's feedback part
    (``holdout``: :class:`ftagent.core.holdout.Holdout`), or the whole validation split without one."""
    rows = subset_rows(bench, root, "validation")
    if holdout is None:
        return rows, "the validation split"
    single = len(bench.spec.subsets) == 1
    out = {}
    for subset, items in rows.items():
        ids = {int(i) for i in holdout.feedback.get(bench.spec.key if single else f"{bench.spec.key}-{subset}", ())}
        out[subset] = [row for i, row in enumerate(items) if i in ids]
    size = sum(len(v) for v in out.values())
    return out, (f"validation's feedback part ({size} items)" if size
                 else "validation's feedback part (empty: nothing to choose on)")


def choice_key(holdout: Any) -> str:
    """Which feedback part the constant was chosen on (the stored baseline's key; '' without one)."""
    return f"seed {holdout.seed}, share {holdout.share:g}" if holdout is not None else ""


def _domain_subset(bench: Any, subset: str, rows: list[dict[str, Any]], choose: list[dict[str, Any]]
                   ) -> SubsetBaseline:
    from ftagent.benchmarks.constant_candidates import candidates
    from ftagent.benchmarks.domain import evaluate_subtask
    from ftagent.benchmarks.domain_adapters import family_of

    family = family_of(bench)
    metric = bench.config.subset_metrics.get(subset, bench.spec.core_metric)
    if (family, subset) in _SKIP_SUBTASKS or not choose:
        return SubsetBaseline(answer=None, score=None, metric=metric, items=len(rows))

    def score(candidate: Any, on: list[dict[str, Any]]) -> float | None:
        items = [json.loads(r["item_json"]) for r in on]
        try:
            value = evaluate_subtask(family, subset, [candidate.output(it) for it in items], items).get(metric)
        except Exception:  # noqa: BLE001 - a scorer that rejects this answer: not a candidate
            return None
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    chosen = [json.loads(r["item_json"]) for r in choose]
    golds = [str(r.get("answer", "")).strip() for r in choose]
    best: tuple[float, Any] | None = None
    for candidate in candidates(family, subset, golds, chosen):
        value = score(candidate, choose)
        if value is not None and (best is None or value > best[0]):
            best = (value, candidate)
        if best is not None and best[0] >= 100.0:  # nothing scores more
            break
    if best is None:
        return SubsetBaseline(answer=None, score=None, metric=metric, items=len(rows))
    candidate = best[1]
    return SubsetBaseline(answer=candidate.text, rule=candidate.name, score=score(candidate, rows), metric=metric,
                          items=len(rows))


def _gold_shares(bench: Any, rows: dict[str, list[dict[str, Any]]], choose: dict[str, list[dict[str, Any]]]
                 ) -> dict[str, SubsetBaseline]:
    """One constant for the benchmark: the most frequent gold of the choice rows; per sub-dataset its share."""
    def gold(row: dict[str, Any]) -> str:
        return " ".join(str(row.get(bench.spec.output_column, "")).split())

    counts = Counter(gold(r) for part in choose.values() for r in part)
    answer = counts.most_common(1)[0][0] if counts else None
    rule = f"always {answer!r}" if answer is not None else ""
    return {s: SubsetBaseline(answer=answer, rule=rule, metric=bench.spec.core_metric, items=len(r),
                              score=100.0 * sum(gold(x) == answer for x in r) / len(r) if r and answer is not None
                              else None) for s, r in rows.items()}


def _programs(bench: Any, root: Path, split: str, rows: dict[str, list[dict[str, Any]]],
              program_score: ProgramScore | None) -> dict[str, SubsetBaseline]:
    """The always-equal program's pass rate per sub-dataset (not computable without ``program_score``)."""
    metric = bench.spec.core_metric
    counts = program_score(bench, root, split) if program_score is not None else None
    return {s: SubsetBaseline(answer=None, rule=ALWAYS_EQUAL, metric=metric, items=len(r),
                              score=100.0 * counts[s][0] / counts[s][1] if counts and counts.get(s, (0, 0))[1]
                              else None) for s, r in rows.items()}


def constant_answer_baseline(bench: Any, root: Path, split: str = "validation", *, holdout: Any = None,
                             program_score: ProgramScore | None = None) -> ConstantBaseline:
    """The constant answer of each sub-dataset of the prepared ``split`` (see the module docstring).

    Args:
        bench: the benchmark adapter (``get_benchmark(key)``).
        root: the prepared benchmarks folder (``FT_FILE_PATH/benchmarks``, or a session's own copy).
        split: ``validation`` (the split the agent steers by) or ``test``.
        holdout: the session's validation parts (the constant is chosen on the feedback part); None: on the
            whole validation split.
        program_score: runs the always-equal program for a code benchmark (None: not computable).
    """
    rows = subset_rows(bench, root, split)
    choose, chosen_on = choice_rows(bench, root, holdout)
    config = getattr(bench, "config", None)
    if bench.spec.category == "code":
        method, chosen_on = "run against the tests by the benchmark's own evaluator", ""
        subsets = _programs(bench, root, split, rows, program_score)
    elif config is not None and config.data.loader == "domain":
        method = BEST_CONSTANT
        subsets = {s: _domain_subset(bench, s, r, choose.get(s, [])) for s, r in rows.items()}
    else:
        method = GOLD_SHARE
        subsets = _gold_shares(bench, rows, choose)
    score = _mean([v.score for v in subsets.values() if v.score is not None])
    return ConstantBaseline(benchmark=bench.spec.key, split=split, score=score, metric=bench.spec.core_metric,
                            method=method, chosen_on=chosen_on, subsets=subsets, data=_digest(bench, root, split),
                            choice="" if bench.spec.category == "code" else choice_key(holdout))


def _folder(bench: Any, root: Path) -> Path:
    return Path(bench.bench_dir(root)) if hasattr(bench, "bench_dir") else Path(root) / bench.spec.key


def _digest(bench: Any, root: Path, split: str) -> str:
    path = _folder(bench, root) / f"{split}.jsonl"
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""


def stored_constant_baseline(bench: Any, root: Path, store: Path, split: str = "validation", *,
                             holdout: Any = None, program_score: ProgramScore | None = None
                             ) -> ConstantBaseline | None:
    """:func:`constant_answer_baseline`, kept in ``<store>/constant_baseline_<key>_<split>.json`` (the
    evaluation cache folder: the benchmark's own folder stays as prepared, its files may be hashed) and
    computed again when the split's file, the choice rows or the scoring rules change (or when a kept one
    could not run the programs and ``program_score`` now can); None when the split is not prepared."""
    folder = _folder(bench, root)
    if not (folder / f"{split}.jsonl").is_file():
        return None
    Path(store).mkdir(parents=True, exist_ok=True)
    path = Path(store) / f"constant_baseline_{bench.spec.key}_{split}.json"
    digest = _digest(bench, root, split)
    chosen_on = "" if bench.spec.category == "code" else choice_rows(bench, root, holdout)[1]
    if path.is_file():
        try:
            kept = ConstantBaseline.model_validate_json(path.read_text(encoding="utf-8"))
            if kept.scoring == SCORING_VERSION and kept.data == digest and kept.chosen_on == chosen_on \
                    and kept.choice == ("" if bench.spec.category == "code" else choice_key(holdout)) \
                    and not (kept.score is None and program_score is not None):
                return kept
        except ValueError:
            pass
    result = constant_answer_baseline(bench, root, split, holdout=holdout, program_score=program_score)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(result.model_dump_json(indent=1), encoding="utf-8")
    tmp.replace(path)
    return result


def answers_nearly_constant(predictions: list[Any], threshold: float = 0.9, *, min_items: int = 5) -> bool:
    """True when at least ``threshold`` of the answers are the same (whitespace collapsed, case kept);
    fewer than ``min_items`` answers are never flagged (too few to tell)."""
    texts = [" ".join(str(p if p is not None else "").split()) for p in predictions]
    if len(texts) < max(1, min_items):
        return False
    return Counter(texts).most_common(1)[0][1] >= threshold * len(texts)
