"""Issue 31 item 3: the final evaluation's items ("full" = every item outside validation)."""

from __future__ import annotations

import json

from ftagent.benchmarks import get_benchmark
from ftagent.benchmarks.splits import final_indices, split_indices


def test_full_is_test_then_every_item_in_neither_split():
    parts = split_indices(500)
    full = final_indices(500)
    assert full[:100] == parts["test"]  # test first: a full score contains the test items
    assert len(full) == 400 and len(set(full)) == 400
    assert not set(full) & set(parts["validation"])  # never a validation item
    assert set(full) | set(parts["validation"]) == set(range(500))


def test_full_equals_test_when_there_is_no_rest_or_rest_is_a_training_set():
    assert final_indices(200) == split_indices(200)["test"]  # the demo: 200 items, 100/100
    assert final_indices(4) == split_indices(4)["test"] and len(final_indices(5)) == 3  # odd: one left over
    assert final_indices(500, rest=False) == split_indices(500)["test"]  # FinanceIQ: rows in neither = training


def test_full_is_stratified_like_the_splits_and_capped_by_the_limit():
    groups = ["a" if i % 3 else "b" for i in range(600)]
    val = set(split_indices(600, None, groups)["validation"])
    full = final_indices(600, None, groups)
    assert len(full) == 500 and not set(full) & val
    capped = final_indices(600, 10, groups)
    assert capped == split_indices(600, 10, groups)["test"]  # under FT_BENCHMARK_LIMIT: the test split
    assert not set(capped) & set(split_indices(600, None, groups)["validation"])


def test_prepare_writes_the_full_split_and_an_old_folder_is_prepared_again(tmp_path):
    from ftagent.benchmarks.prepared import prepare_benchmark

    out = tmp_path / "demo_add"
    out.mkdir()
    old = {"limit": None, "split_rule": "2", "scoring": json.dumps(None)}
    (out / "prepared.json").write_text(json.dumps(old), encoding="utf-8")  # a folder made before "full"
    prepare_benchmark(get_benchmark("demo_add"), tmp_path, None)
    rows = {s: (out / f"{s}.jsonl").read_text(encoding="utf-8").splitlines() for s in ("validation", "test", "full")}
    assert rows["full"] == rows["test"] and len(rows["full"]) == 100  # demo_add: "full" equals "test"
    assert (out / "full" / "default.jsonl").is_file()
    assert json.loads((out / "prepared.json").read_text())["splits"] == ["validation", "test", "full"]


def test_financeiq_keeps_its_training_rows_out_of_the_final_set():
    from ftagent.benchmarks import get_benchmark

    assert get_benchmark("FinanceIQ_gen").config.data.final_rest is False
    assert get_benchmark("gsm8k").config.data.final_rest is True
