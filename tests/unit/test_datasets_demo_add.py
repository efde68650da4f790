"""demo_add generation: seeded, distinct, disjoint from the benchmark's pairs."""

from __future__ import annotations

import re

from ftagent.datasets.demo_add import benchmark_pairs, generate_rows


def _pairs(rows):
    return {tuple(int(x) for x in re.findall(r"\d+", r["instruction"])) for r in rows}


def test_rows_are_seeded_and_well_formed():
    rows = generate_rows(200, seed=3)
    assert rows == generate_rows(200, seed=3) and rows != generate_rows(200, seed=4)
    assert len(_pairs(rows)) == 200
    for r in rows:
        a, b = map(int, re.findall(r"\d+", r["instruction"]))
        assert 10 <= a <= 99 and 10 <= b <= 99
        assert r == {"instruction": f"What is {a} + {b}? Put the final answer in \\boxed{{}}.", "input": "",
                     "output": f"\\boxed{{{a + b}}}"}


def test_exclusion_is_honoured():
    exclude = {(a, b) for a in range(10, 60) for b in range(10, 100)}  # 4500 of 8100 pairs
    rows = generate_rows(3000, seed=1, exclude=exclude)
    assert not _pairs(rows) & exclude
    assert len(_pairs(rows)) == 3000


def test_benchmark_pairs_are_excluded_by_default(tmp_path):
    import json

    from ftagent.datasets.demo_add import generate

    bench = benchmark_pairs()
    assert bench, "ftagent.benchmarks.demo.demo_add_pairs() should expose the benchmark pairs"
    generate(tmp_path)
    rows = json.loads((tmp_path / "demo_add_train.json").read_text())
    assert not _pairs(rows) & bench
