"""The split rule on the real layouts of the built-in benchmarks (issue #21): which items are validation
and which are test. Each test fails on split rule 1 (first/last k rows as read, every parquet file)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ftagent.benchmarks import get_benchmark
from ftagent.benchmarks.base import write_jsonl


def _parquet(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def _raw(root: Path, key: str) -> Path:
    raw = root / key / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    (raw / ".complete").write_text("ok\n", encoding="utf-8")
    return raw


def _math_row(kind: str, i: int) -> dict:
    # nlile/hendrycks-MATH-benchmark columns: problem, solution, answer, subject, level, unique_id
    return {"problem": f"{kind} problem {i}", "solution": f"so \\boxed{{{i}}}", "answer": str(i),
            "subject": "Algebra", "level": 1, "unique_id": f"{kind}/algebra/{i}.json"}


def test_math_is_split_from_its_test_file_only(tmp_path):
    """Old rule: every parquet file matched, so test = the last rows of MATH *train*."""
    raw = _raw(tmp_path, "math")
    _parquet(raw / "data" / "test-00000-of-00001.parquet", [_math_row("test", i) for i in range(10)])
    _parquet(raw / "data" / "train-00000-of-00001.parquet", [_math_row("train", i) for i in range(40)])
    bench = get_benchmark("math")
    bench.prepare(tmp_path)
    items = [r for s in ("validation", "test") for r in bench.load_items(tmp_path, s)]
    assert len(items) == 10 and all(r["question"].startswith("test problem") for r in items)
    assert bench.config.data.allow_patterns == ["data/test-*", "README.md"]  # train is not even downloaded


def _mmlu_rows(subjects: dict[str, int]) -> list[dict]:
    """cais/mmlu ``all/test`` layout: subjects concatenated in alphabetical order."""
    return [{"question": f"{s} q{i}", "subject": s, "choices": ["w", "x", "y", "z"], "answer": i % 4}
            for s, n in sorted(subjects.items()) for i in range(n)]


def test_mmlu_splits_hold_every_subject_in_proportion(tmp_path):
    """Old rule: validation = the first 100 rows = abstract algebra only, test = world religions only."""
    raw = _raw(tmp_path, "mmlu")
    sizes = {"abstract_algebra": 100, "anatomy": 135, "world_religions": 171, "virology": 166}
    _parquet(raw / "all" / "test-00000-of-00001.parquet", _mmlu_rows(sizes))
    bench = get_benchmark("mmlu")
    bench.prepare(tmp_path)
    for split in ("validation", "test"):
        got = Counter(r["subject"] for r in bench.load_items(tmp_path, split))
        assert sum(got.values()) == 100
        assert got == {"abstract algebra": 17, "anatomy": 24, "world religions": 30, "virology": 29}, got
    val = {r["question"] for r in bench.load_items(tmp_path, "validation")}
    assert not val & {r["question"] for r in bench.load_items(tmp_path, "test")}


def test_mmlu_split_is_the_same_on_every_prepare(tmp_path):
    raw = _raw(tmp_path, "mmlu")
    _parquet(raw / "all" / "test-00000-of-00001.parquet", _mmlu_rows({"a": 50, "b": 70, "c": 90}))
    bench = get_benchmark("mmlu")
    first = bench.prepare(tmp_path) and bench.load_items(tmp_path, "test")
    bench.prepare(tmp_path)
    assert bench.load_items(tmp_path, "test") == first


def test_a_file_sorted_by_label_cannot_score_100_then_0(tmp_path):
    """ChemCoTBench equivalence is 50 "Yes" then 50 "No": always answering "Yes" scored 100 on
    validation and 0 on test under the old rule."""
    rows = [{"question": f"same molecule {i}?", "answer": "Yes" if i < 50 else "No"} for i in range(100)]
    write_jsonl(tmp_path / "eq.jsonl", rows)
    (tmp_path / "eq.yaml").write_text("name: eq_sorted\ndata: {file: eq.jsonl}\nprompt: '{question}'\n"
                                      "metric: exact_match\n", encoding="utf-8")
    bench = get_benchmark(str(tmp_path / "eq.yaml"))
    bench.prepare(tmp_path / "files")
    for split in ("validation", "test"):
        yes = sum(r["answer"] == "Yes" for r in bench.load_items(tmp_path / "files", split))
        assert 15 <= yes <= 35, (split, yes)  # of 50: always-"Yes" scores near 50 % on both


def test_domain_subtask_sorted_by_label_is_shuffled(tmp_path):
    """The domain families split each sub-task after the same seed-42 shuffle (fixture: real layout)."""
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "benchmarks" / "chemcotbench" / "mol_und.json"
    records = [r for r in json.loads(fixture.read_text(encoding="utf-8")) if r.get("subtask") == "equivalence"]
    template = records[0]
    rows = [dict(template, id=f"eq{i}", gt="Yes" if i < 50 else "No") for i in range(100)]
    raw = _raw(tmp_path, "chemcotbench_mol_und")
    (raw / "mol_und.json").write_text(json.dumps(rows), encoding="utf-8")
    bench = get_benchmark("chemcotbench_mol_und")
    bench.prepare(tmp_path)
    for split in ("validation", "test"):
        golds = [r["answer"] for r in bench.load_items(tmp_path, split) if r["subset"] == "equivalence"]
        assert len(golds) == 50 and 15 <= golds.count("Yes") <= 35, (split, Counter(golds))


def test_a_prepared_folder_of_the_old_rule_is_prepared_again(tmp_path):
    from ftagent.benchmarks.prepared import prepare_benchmark

    out = tmp_path / "demo_add"
    out.mkdir()
    (out / "prepared.json").write_text(json.dumps({"limit": None}), encoding="utf-8")  # rule 1's marker
    prepare_benchmark(get_benchmark("demo_add"), tmp_path, None)
    assert (out / "validation.jsonl").is_file()
    assert json.loads((out / "prepared.json").read_text())["split_rule"] == "2"


def test_the_eval_cache_key_names_the_split_rule(monkeypatch):
    from ftagent.tools.opencompass import cache

    args = ("digest", "mmlu", "validation", {"limit": None}, {"t": 0}, "2")
    key = cache.cache_key(*args)
    monkeypatch.setattr(cache, "SPLIT_VERSION", "3")
    assert cache.cache_key(*args) != key
