"""Trivial baselines: what one constant answer scores, and whether a model's answers are (nearly) constant.

On the real files a constant answer scores high on some sub-tasks (ChemCoTBench ``fg_count`` "1":
90 %, ``mol_opt`` "benzene": 78.7 %, ``ring_system_scaffold`` "Yes": 63-70 %), so a base model's
score, or a gain, means little without it (issue 31 item 7).

* :func:`constant_answer_baseline` — the best single constant answer of each sub-dataset of a
  prepared split, and the benchmark's headline over them (the plain mean over sub-datasets, as
  every headline here). Domain families are scored by the benchmark's own scorer
  (:func:`ftagent.benchmarks.domain.evaluate_subtask`, what ``DomainEvaluator`` runs), each
  candidate written in the forms a model would (bare, ``{"answer": …}``, ``Final Answer: …``, the
  family's own answer tags).
  The other benchmarks' scorers run in the tool env (OpenCompass); there, the constant is the most
  frequent gold answer and its score is that gold's share (``method`` says so), and code
  benchmarks have none (a constant program passes no tests).
* :func:`stored_constant_baseline` — the same, computed once per prepared folder and scoring rules
  (in the evaluation cache folder), for the brief, the report and the card.
* :func:`answers_nearly_constant` — a guard's check that a candidate's answers are (nearly) all the
  same (wiring it into the integrity guard is a separate task).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ftagent.benchmarks.components import SCORING_VERSION
from ftagent.engine.events import ConstantAnswer

#: constants every domain sub-dataset also tries (yes/no, small counts, option letters, small molecules:
#: on ChemCoTBench's solubility items water ("O") "improves" 100 % of the sources, benzene 95 %)
COMMON_CONSTANTS = ("Yes", "No", "True", "False", "0", "1", "2", "3", "A", "B", "C", "D", "c1ccccc1", "O", "CCO")
TOP_GOLDS = 10  # the most frequent gold answers tried per sub-dataset (those given at least twice)
_NOT_CONSTANT = {"code"}  # categories whose scorer runs programs: no constant answer passes
_SKIP_SUBTASKS = {("tablebench", "visualization")}  # answers are chart programs run in a sandbox


class SubsetBaseline(BaseModel):
    """The best constant answer of one sub-dataset."""

    answer: str | None = Field(description="the constant output (as written to the scorer); None: none")
    score: float | None = Field(description="its core metric on the split (None: not computable)")
    metric: str
    items: int


class ConstantBaseline(BaseModel):
    """The constant-answer baseline of one benchmark split (see the module docstring)."""

    benchmark: str
    split: str
    score: float | None = Field(description="the headline: mean of the sub-datasets' best constant scores")
    metric: str
    method: str = Field(description="how the constants were scored (the benchmark's own scorer, or gold share)")
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
                              answers={k: str(v.answer) for k, v in self.top()})

    def line(self) -> str:
        """One line for the brief, report and card."""
        if self.score is None:
            return f"constant-answer baseline: not computable ({self.method})"
        best = "; ".join(f"{k}: {v.answer!r} scores {v.score:.1f}" for k, v in self.top() if len(self.subsets) > 1)
        return (f"a constant answer scores {self.score:.1f} {self.metric} on the {self.split} split"
                + (f" (best sub-datasets: {best})" if best else "") + f" [{self.method}]")


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


#: constants one family's sub-datasets also try (PANORAMA NOC4PC's three codes)
FAMILY_CONSTANTS = {"panorama": ("ALLOW", "102", "103")}


def _wrapped(family: str, value: str) -> list[str]:
    """``value`` in the forms a model writes it: bare, ``{"answer": …}``, ``Final Answer: …`` and the
    family's own (PANORAMA NOC4PC's ``{"code": …}``, BioProBench's answer tags, with a confidence for PQA)."""
    forms = [value, json.dumps({"answer": value}, ensure_ascii=False), f"Final Answer: {value}"]
    if family == "panorama":
        forms.append(json.dumps({"code": value}))
    if family == "bioprobench":
        from ftagent.benchmarks.domain.bioprobench import END, START

        forms += [f"{START}{value}{END}", f"{START}{value} & 100{END}"]
    return forms


def _domain_subset(bench: Any, subset: str, rows: list[dict[str, Any]]) -> SubsetBaseline:
    from ftagent.benchmarks.domain import evaluate_subtask
    from ftagent.benchmarks.domain_adapters import family_of

    family = family_of(bench)
    metric = bench.config.subset_metrics.get(subset, bench.spec.core_metric)
    if (family, subset) in _SKIP_SUBTASKS:
        return SubsetBaseline(answer=None, score=None, metric=metric, items=len(rows))
    items = [json.loads(r["item_json"]) for r in rows]
    golds = [str(r.get("answer", "")).strip() for r in rows]
    values = [g for g, n in Counter(g for g in golds if g).most_common(TOP_GOLDS) if n > 1]
    values += [c for c in (*COMMON_CONSTANTS, *FAMILY_CONSTANTS.get(family, ())) if c not in values]
    best: tuple[float, str] | None = None
    for value in values:
        for output in _wrapped(family, value):
            try:
                result = evaluate_subtask(family, subset, [output] * len(items), items)
            except Exception:  # noqa: BLE001 - a scorer that rejects this constant: not a candidate
                continue
            score = result.get(metric)
            if isinstance(score, (int, float)) and not isinstance(score, bool) and (best is None or score > best[0]):
                best = (float(score), output)
        if best is not None and best[0] >= 100.0:  # nothing scores more
            break
    return SubsetBaseline(answer=best[1] if best else None, score=best[0] if best else None, metric=metric,
                          items=len(rows))


def _gold_share(bench: Any, rows: list[dict[str, Any]]) -> SubsetBaseline:
    golds = Counter(" ".join(str(r.get(bench.spec.output_column, "")).split()) for r in rows)
    answer, count = golds.most_common(1)[0] if golds else (None, 0)
    return SubsetBaseline(answer=answer, score=100.0 * count / len(rows) if rows else None,
                          metric=bench.spec.core_metric, items=len(rows))


def constant_answer_baseline(bench: Any, root: Path, split: str = "validation") -> ConstantBaseline:
    """The best constant answer of each sub-dataset of the prepared ``split`` (see the module docstring).

    Args:
        bench: the benchmark adapter (``get_benchmark(key)``).
        root: the prepared benchmarks folder (``FT_FILE_PATH/benchmarks``).
        split: ``validation`` (the split the agent steers by) or ``test``.
    """
    rows = bench.load_items(root, split)
    by_subset: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_subset.setdefault(str(row.get("subset") or bench.spec.key), []).append(row)
    config = getattr(bench, "config", None)
    domain = config is not None and config.data.loader == "domain"
    if bench.spec.category in _NOT_CONSTANT:
        method = "not applicable: answers are programs run against tests"
        subsets = {s: SubsetBaseline(answer=None, score=None, metric=bench.spec.core_metric, items=len(r))
                   for s, r in by_subset.items()}
    elif domain:
        method = "best constant, scored by the benchmark's own scorer"
        subsets = {s: _domain_subset(bench, s, r) for s, r in by_subset.items()}
    else:
        method = "most frequent gold answer, its share of the items"
        subsets = {s: _gold_share(bench, r) for s, r in by_subset.items()}
    score = _mean([v.score for v in subsets.values() if v.score is not None])
    return ConstantBaseline(benchmark=bench.spec.key, split=split, score=score, metric=bench.spec.core_metric,
                            method=method, subsets=subsets, data=_digest(bench, root, split))


def _folder(bench: Any, root: Path) -> Path:
    return Path(bench.bench_dir(root)) if hasattr(bench, "bench_dir") else Path(root) / bench.spec.key


def _digest(bench: Any, root: Path, split: str) -> str:
    path = _folder(bench, root) / f"{split}.jsonl"
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""


def stored_constant_baseline(bench: Any, root: Path, store: Path, split: str = "validation"
                             ) -> ConstantBaseline | None:
    """:func:`constant_answer_baseline`, kept in ``<store>/constant_baseline_<key>_<split>.json`` (the
    evaluation cache folder: the benchmark's own folder stays as prepared, its files may be hashed) and
    computed again when the split's file or the scoring rules change; None when the split is not prepared."""
    folder = _folder(bench, root)
    if not (folder / f"{split}.jsonl").is_file():
        return None
    Path(store).mkdir(parents=True, exist_ok=True)
    path = Path(store) / f"constant_baseline_{bench.spec.key}_{split}.json"
    digest = _digest(bench, root, split)
    if path.is_file():
        try:
            kept = ConstantBaseline.model_validate_json(path.read_text(encoding="utf-8"))
            if kept.scoring == SCORING_VERSION and kept.data == digest:
                return kept
        except ValueError:
            pass
    result = constant_answer_baseline(bench, root, split)
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
