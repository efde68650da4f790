"""FinanceIQ: the training copy holds no row the benchmark evaluates; prepare() reads the published header.

Both sides run on the project's own fixture (tests/fixtures/datasets/financeiq: ``,Question,A,B,C,D,Answer``
with an unnamed index column, as published). Before the fix the benchmark's prepare() raised KeyError on
that header, and the training copy kept the first rows of each test CSV = the validation rows. Since the
seed-42 shuffle (split rule 2) the training copy keeps the rows in neither split.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ftagent.benchmarks import get_benchmark
from ftagent.benchmarks.splits import permutation
from ftagent.datasets.registry import get_source

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "datasets" / "financeiq"


def _benchmark(tmp_path: Path):
    root = tmp_path / "benchmarks"
    raw = root / "FinanceIQ_gen" / "raw"
    shutil.copytree(FIXTURE, raw)
    (raw / ".complete").write_text("ok\n", encoding="utf-8")
    bench = get_benchmark("FinanceIQ_gen")
    bench.prepare(root)
    return bench, root


def test_prepare_reads_the_published_header(tmp_path):
    bench, root = _benchmark(tmp_path)
    val, test = bench.load_items(root, "validation"), bench.load_items(root, "test")
    assert {r["subset"] for r in val} == {"经济师", "注册会计师（CPA）"}
    perm = permutation(7)  # 经济师 has 7 rows: validation = perm[:3], test = perm[4:] (seed-42 shuffle)
    assert [r["question"][:10] for r in val if r["subset"] == "经济师"] == [f"经济师test第{i}题" for i in perm[:3]]
    assert [r["question"][:10] for r in test if r["subset"] == "经济师"] == [f"经济师test第{i}题" for i in perm[4:]]
    first = next(r for r in val if r["subset"] == "经济师")
    assert first["A"] == f"选项甲{perm[0]}" and first["answer"] in "ABCD"
    (block,) = [b for b in bench.dataset_blocks(root, "validation") if b.abbr.endswith("经济师")]
    assert len(block.rounds) == 11 and block.rounds[1]["prompt"] == "答案是: A\n"
    assert "经济师dev第0题" in block.rounds[0]["prompt"] and "{question}" in block.rounds[-1]["prompt"]


def test_training_copy_excludes_every_validation_and_test_row(tmp_path):
    bench, root = _benchmark(tmp_path)
    evaluated = [r["question"] for split in ("validation", "test") for r in bench.load_items(root, split)]
    assert len(evaluated) == 6 + 2  # 经济师: 3 + 3 of 7 rows; CPA: 1 + 1 of 3 rows

    train_root = tmp_path / "datasets" / "financeiq"
    shutil.copytree(FIXTURE, train_root)
    source = get_source("financeiq")
    source.post_download(train_root)
    rows = source.to_alpaca(train_root, None, 0)
    text = "\n".join(r["instruction"] + r["output"] for r in rows)
    leaked = [q for q in evaluated if q in text]
    assert not leaked, f"benchmark rows in the training copy: {leaked}"
    assert len(rows) == 2  # the rows in neither split: one of 经济师's 7, one of CPA's 3
    assert f"经济师test第{permutation(7)[3]}题" in text and "dev第" not in text  # dev (5-shot) rows are dropped too
