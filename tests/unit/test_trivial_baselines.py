"""Constant-answer baselines and the nearly-constant-answers check (issue 31 item 7)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from ftagent.benchmarks import get_benchmark
from ftagent.benchmarks.base import read_jsonl
from ftagent.benchmarks.baselines import (
    ConstantBaseline,
    answers_nearly_constant,
    constant_answer_baseline,
    stored_constant_baseline,
)
from ftagent.benchmarks.domain import chem
from ftagent.benchmarks.domain_adapters import raw_dir
from tests.helpers.resolved_run import resolved_run

FG_QUERY = ("Count the number of benzene_ring in the molecule. Molecule SMILES: {smi}. Your response must be "
            "directly parsable JSON format: {{\"count\": \"Your Answer Number\"}}")
RS_QUERY = ("Is the ring system {ring} a substructure of the molecule {smi}? Your response must be directly "
            "parsable JSON format: {{\"output\": \"Yes / No\"}}")
SMILES = ["CCO", "c1ccccc1O", "CC(=O)Nc1ccccc1", "Cc1ccccc1", "c1ccc2ccccc2c1", "OC(=O)c1ccccc1", "CCN(CC)CC",
          "c1ccncc1", "Clc1ccccc1", "COc1ccccc1", "CCCCCC", "c1ccc(cc1)N", "CC(C)O", "O=Cc1ccccc1", "CCOC(=O)C",
          "Brc1ccccc1", "c1cc[nH]c1", "CC#N", "NCCO", "OCCO"]


def _rows() -> list[dict]:
    # the shape of the real sub-tasks: fg_count golds are mostly "1", ring_system mostly "Yes"
    rows = []
    for i, smi in enumerate(SMILES):
        rows.append({"id": f"fg{i}", "query": FG_QUERY.format(smi=smi), "gt": "2" if i % 10 == 0 else "1",
                     "task": "mol_und", "subtask": "fg_count", "meta": "{}"})
        rows.append({"id": f"rs{i}", "query": RS_QUERY.format(ring="c1ccccc1", smi=smi),
                     "gt": "No" if i % 10 in (1, 4, 7) else "Yes", "task": "mol_und",
                     "subtask": "ring_system_scaffold", "meta": "{}"})
    return rows


@pytest.fixture()
def prepared(tmp_path) -> tuple[object, Path]:
    root = tmp_path / "benchmarks"
    raw = raw_dir(root, "chemcotbench_mol_und")
    raw.mkdir(parents=True)
    (raw / "mol_und.json").write_text(json.dumps(_rows()), encoding="utf-8")
    bench = get_benchmark("chemcotbench_mol_und")
    bench.prepare(root)
    return bench, root


def _share(root: Path, subset: str, gold: str) -> float:
    rows = [r for r in read_jsonl(root / "chemcotbench_mol_und" / "validation.jsonl") if r["subset"] == subset]
    return 100.0 * Counter(r["answer"] for r in rows)[gold] / len(rows)


@pytest.mark.skipif(not chem.available(), reason="RDKit not installed")
def test_the_best_constant_answer_is_scored_by_the_benchmarks_own_scorer(prepared):
    bench, root = prepared
    base = constant_answer_baseline(bench, root)
    fg, rs = base.subsets["fg_count"], base.subsets["ring_system_scaffold"]
    assert fg.score == pytest.approx(_share(root, "fg_count", "1")) and fg.score >= 80.0
    assert json.loads(fg.answer) == {"answer": "1"} or fg.answer.endswith("1")
    assert rs.score == pytest.approx(_share(root, "ring_system_scaffold", "Yes")) and "Yes" in rs.answer
    assert base.score == pytest.approx((fg.score + rs.score) / 2)
    assert base.method.startswith("best constant, scored by the benchmark's own scorer")
    assert "fg_count" in base.line() and "a constant answer scores" in base.line()


@pytest.mark.skipif(not chem.available(), reason="RDKit not installed")
def test_the_baseline_is_kept_with_the_prepared_folder_until_the_split_changes(prepared, monkeypatch):
    bench, root = prepared
    before = sorted(p.name for p in (root / "chemcotbench_mol_und").iterdir())
    store = root.parent / "eval_cache"
    first = stored_constant_baseline(bench, root, store)
    path = store / "constant_baseline_chemcotbench_mol_und_validation.json"
    assert first is not None and ConstantBaseline.model_validate_json(path.read_text()) == first
    assert sorted(p.name for p in (root / "chemcotbench_mol_und").iterdir()) == before  # left as prepared
    from ftagent.benchmarks import baselines

    monkeypatch.setattr(baselines, "constant_answer_baseline", lambda *a, **k: pytest.fail("recomputed"))
    assert stored_constant_baseline(bench, root, store) == first
    assert stored_constant_baseline(bench, root, store, "missing") is None


def test_other_benchmarks_take_the_share_of_their_most_frequent_gold(tmp_path):
    bench = get_benchmark("demo_add")
    bench.prepare(tmp_path)
    base = constant_answer_baseline(bench, tmp_path)
    assert base.method.startswith("most frequent gold") and base.score is not None and base.score < 20.0


def test_answers_nearly_constant():
    assert answers_nearly_constant(["Yes"] * 9 + ["No"])
    assert answers_nearly_constant([" Yes", "Yes "] * 5)  # whitespace does not make answers differ
    assert not answers_nearly_constant(["Yes"] * 8 + ["No"] * 2)
    assert not answers_nearly_constant(["Yes"] * 3)  # too few to tell
    assert answers_nearly_constant(["1"] * 8 + ["2"] * 2, threshold=0.8)
    assert not answers_nearly_constant([])


@pytest.mark.skipif(not chem.available(), reason="RDKit not installed")
def test_the_brief_names_the_constant_baseline(prepared, tmp_path):
    from ftagent.planners.llm.brief_benchmark import constant_baseline_words

    bench, root = prepared
    words = constant_baseline_words(str(root.parent), bench)
    assert words.startswith("a constant answer scores") and "fg_count" in words
    assert constant_baseline_words(str(tmp_path / "nothing"), bench) == ""
    assert constant_baseline_words(None, bench) == ""
    template = Path(__file__).parents[2] / "ftagent" / "planners" / "llm" / "prompts" / "scenario_brief.j2"
    assert "f.constant_baseline" in template.read_text(encoding="utf-8")  # the brief shows the line


@pytest.mark.skipif(not chem.available(), reason="RDKit not installed")
def test_a_constant_molecule_improves_real_solubility_sources(tmp_path):
    """The sources of the official solubility logs (IDEA-XL/ChemCoTBench@ac04f91, the claude3.7 fixture):
    one small molecule as the answer to every item "improves" them all: the sub-task's baseline is 100 %."""
    logs = json.loads((Path(__file__).parents[1] / "fixtures" / "benchmarks" / "chemcotbench_official"
                       / "claude3.7_molopt.json").read_text(encoding="utf-8"))["logs"]["solubility"]
    query = ("Optimize the source molecule to improve its solubility while keeping its scaffold. Your response "
             "must be directly parsable JSON format: {{\"Final Target Molecule\": \"SMILES\"}}. Source Molecule: {s}.")
    rows = [{"id": f"s{i}", "query": query.format(s=src), "gt": "", "task": "mol_opt", "subtask": "solubility",
             "meta": "{}"} for i, (src, _) in enumerate(logs[:40])]
    root = tmp_path / "benchmarks"
    raw = raw_dir(root, "chemcotbench_mol_opt")
    raw.mkdir(parents=True)
    (raw / "mol_opt.json").write_text(json.dumps(rows), encoding="utf-8")
    bench = get_benchmark("chemcotbench_mol_opt")
    bench.prepare(root)
    sol = constant_answer_baseline(bench, root).subsets["solubility"]
    assert sol.score == 100.0 and set(json.loads(sol.answer)) == {"answer"}  # "B" (a boron atom) comes first


def test_the_model_card_names_the_constant_baseline(tmp_path, monkeypatch):
    from ftagent.core.types import ScenarioInfo
    from ftagent.finetune.export import facts as facts_mod
    from tests.unit.test_export import _card, _export
    from tests.unit.test_export_sessions import exportable_session

    get_benchmark("demo_add").prepare(tmp_path / "ft" / "benchmarks")
    line = facts_mod._constant_baseline(ScenarioInfo.model_construct(file_path=str(tmp_path / "ft"),
                                                                     benchmark="demo_add"))
    assert line.startswith("a constant answer scores") and "the gold answer met most often" in line
    assert facts_mod._constant_baseline(ScenarioInfo.model_construct(file_path=str(tmp_path / "none"),
                                                                     benchmark="demo_add")) == ""
    monkeypatch.setattr(facts_mod, "_constant_baseline", lambda scenario: line)
    folder, _ = _export(exportable_session(tmp_path / "s"))
    assert f"For comparison, {line}: a score near it is no sign of skill." in _card(folder)[1]


def test_family_answer_forms_are_tried(tmp_path):
    """PANORAMA NOC4PC reads {"code": …}: a constant code is a candidate (one item here: full marks)."""
    import shutil

    from ftagent.benchmarks.domain import KEY_SPECS

    root = tmp_path / "benchmarks"
    shutil.copytree(Path(__file__).parents[1] / "fixtures" / "benchmarks" / KEY_SPECS["panorama_noc4pc"]["family"],
                    raw_dir(root, "panorama_noc4pc"))
    bench = get_benchmark("panorama_noc4pc")
    bench.prepare(root)
    noc = constant_answer_baseline(bench, root).subsets["noc4pc"]
    assert noc.score is not None and noc.score > 0 and set(json.loads(noc.answer)) == {"code"}


def test_the_scenario_records_the_constant_baseline_beside_the_base_models_scores(tmp_path, monkeypatch):
    """The base model's benchmark_result events carry what a constant answer scores on their split, for the
    report (ftagent.views cannot compute it: benchmarks is a sibling layer); unprepared: no field at all."""
    import ftagent.tools.opencompass.evaluator as ev
    from ftagent.core.settings import load_settings
    from ftagent.core.trace import Trace
    from ftagent.core.types import EvalResult
    from ftagent.engine.events import BenchmarkResult
    from ftagent.finetune.scenario import FinetuneScenario
    from tests.unit.test_finetune_workflow import _scenario

    monkeypatch.setattr(ev, "evaluate_baseline", lambda *a, **k: {
        s: EvalResult(benchmark="demo_add", split=s, core_metric="accuracy", score=1.0) for s in ("validation", "test")})
    get_benchmark("demo_add").prepare(tmp_path / "ft" / "benchmarks")
    emitted: list = []
    FinetuneScenario(load_settings(), None, emitted.append, run=resolved_run()).baseline(_scenario(tmp_path), Trace(),
                                                                                      lambda s: s)
    results = {e.split: e for e in emitted if isinstance(e, BenchmarkResult)}
    assert set(results) == {"validation", "test"} and all(e.baseline for e in results.values())
    for split, event in results.items():
        kept = stored_constant_baseline(get_benchmark("demo_add"), tmp_path / "ft" / "benchmarks",
                                        tmp_path / "ft" / "eval_cache", split)
        assert event.constant_baseline is not None and event.constant_baseline.score == pytest.approx(kept.score)
        assert event.constant_baseline.method.startswith("most frequent gold") and event.constant_baseline.line
    emitted.clear()
    FinetuneScenario(load_settings(), None, emitted.append, run=resolved_run()).baseline(_scenario(tmp_path / "bare"), Trace(),
                                                                     lambda s: s)
    assert [e.constant_baseline for e in emitted if isinstance(e, BenchmarkResult)] == [None, None]


def test_the_report_shows_the_constant_baseline_beside_the_baseline(tmp_path):
    from ftagent.engine.events import BenchmarkResult, ConstantAnswer
    from ftagent.views.report import build_report, render_markdown
    from tests.unit.test_export_sessions import exportable_session

    session = exportable_session(tmp_path / "s")
    before = build_report(session)
    md = render_markdown(before)
    assert before.constant_baseline == {} and "constant answer" not in md and "None" not in md
    line = "a constant answer scores 63.3 accuracy on the validation split (best sub-datasets: rs: 'Yes' ...)"
    with (session / "events.jsonl").open("a", encoding="utf-8") as fh:
        fh.write(BenchmarkResult(split="validation", benchmark="demo_add", core_metric="accuracy", score=12.0,
                                 baseline=True, constant_baseline=ConstantAnswer(
                                     score=63.3, metric="accuracy", method="best constant", line=line,
                                     answers={"rs": "Yes"})).model_dump_json() + "\n")
    report = build_report(session)
    md = render_markdown(report)
    assert "| a constant answer | 63.30 | – |" in md
    assert f"Trivial baseline: {line}; a score near it is no sign of skill." in md
    data = json.loads(report.model_dump_json())
    assert data["constant_baseline"]["validation"]["score"] == 63.3 and "test" not in data["constant_baseline"]
    assert data["constant_baseline"]["validation"]["answers"] == {"rs": "Yes"}


def test_the_model_card_counts_the_integrity_guards_verdicts(tmp_path):
    """The exported loop's 'integrity' event: one line on the card; no event (guard not run): no line."""
    from ftagent.engine.events import CheckVerdict, IntegrityEvent
    from tests.unit.test_export import _card, _export
    from tests.unit.test_export_sessions import exportable_session

    session = exportable_session(tmp_path / "s")
    folder, _ = _export(session, to=tmp_path / "before")
    assert "Integrity guard" not in _card(folder)[1]
    checks = [CheckVerdict(name=n, passed=True) for n in ("tokenizer", "chat_template", "weights")]
    with (session / "events.jsonl").open("a", encoding="utf-8") as fh:
        fh.write(IntegrityEvent(loop=0, checks=[*checks, CheckVerdict(name="data_script")]).model_dump_json() + "\n")
        fh.write(IntegrityEvent(loop=2, checks=[CheckVerdict(name="weights", passed=False)], flags=1)
                 .model_dump_json() + "\n")
    folder, _ = _export(session, to=tmp_path / "after")
    assert "Integrity guard: 3 checks, 0 flagged, 1 not applicable (tokenizer" in _card(folder)[1]
