"""Bad benchmark data (a missing column, an empty split, a label outside the options) is one clear
UserInputError (exit code 2 at the CLI) naming the file and the field, never a silent 0 % (issue #21)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ftagent.benchmarks import get_benchmark
from ftagent.core.errors import UserInputError


def _raw(root: Path, key: str) -> Path:
    raw = root / key / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    (raw / ".complete").write_text("ok\n", encoding="utf-8")
    return raw


def _parquet(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def test_a_missing_column_names_the_file_row_and_field(tmp_path):
    raw = _raw(tmp_path, "mmlu")
    rows = [{"question": f"q{i}", "subject": "anatomy", "answer": 1} for i in range(4)]  # no `choices`
    _parquet(raw / "all" / "test-00000-of-00001.parquet", rows)
    with pytest.raises(UserInputError) as err:
        get_benchmark("mmlu").prepare(tmp_path)
    text = str(err.value)
    assert "test-00000-of-00001.parquet, row 1" in text and "'choices'" in text and "mmlu.yaml" in text


def test_a_gold_letter_outside_the_options_names_the_file_and_field(tmp_path):
    bench = get_benchmark("FinanceIQ_gen")
    subject = bench.spec.subsets[0]
    raw = _raw(tmp_path, "FinanceIQ_gen")
    for part in ("dev", "test"):
        (raw / "data" / part).mkdir(parents=True)
        body = "".join(f"{i},Q{i},a,b,c,d,{'E' if i == 3 else 'A'}\n" for i in range(6))
        (raw / "data" / part / f"{subject}.csv").write_text(",Question,A,B,C,D,Answer\n" + body, encoding="utf-8")
    with pytest.raises(UserInputError) as err:
        bench.prepare(tmp_path)
    text = str(err.value)
    assert f"{subject}.csv, row 4" in text and "'E'" in text and "A, B, C, D" in text and "`answer`" in text


def test_an_mmlu_answer_index_outside_the_choices_is_an_error(tmp_path):
    raw = _raw(tmp_path, "mmlu")
    rows = [{"question": "q", "subject": "anatomy", "choices": ["w", "x", "y", "z"], "answer": 4}] * 2
    _parquet(raw / "all" / "test-00000-of-00001.parquet", rows)
    with pytest.raises(UserInputError, match="row 1"):
        get_benchmark("mmlu").prepare(tmp_path)


def test_no_test_file_is_an_error_not_an_empty_split(tmp_path):
    """Only MATH's train file present: the old loader read it as the benchmark."""
    raw = _raw(tmp_path, "math")
    _parquet(raw / "data" / "train-00000-of-00001.parquet", [{"problem": "p", "solution": "\\boxed{1}"}] * 4)
    with pytest.raises(UserInputError, match="no rows in the files under .*test-\\*.parquet"):
        get_benchmark("math").prepare(tmp_path)


def test_a_pattern_that_reaches_a_training_file_is_refused(tmp_path):
    raw = _raw(tmp_path, "aime24")  # its patterns are *.jsonl, *.parquet, *.json
    (raw / "train.jsonl").write_text('{"Problem": "p", "Answer": "1"}\n', encoding="utf-8")
    with pytest.raises(UserInputError, match="training file train.jsonl"):
        get_benchmark("aime24").prepare(tmp_path)


def test_a_math_row_without_a_gold_answer_is_an_error(tmp_path):
    raw = _raw(tmp_path, "math")
    rows = [{"problem": "p1", "solution": "\\boxed{1}"}, {"problem": "p2", "solution": "no box"}]
    _parquet(raw / "data" / "test-00000-of-00001.parquet", rows)
    with pytest.raises(UserInputError, match=r"row 2 cannot be read as an item: no gold answer"):
        get_benchmark("math").prepare(tmp_path)


def test_an_empty_user_file_split_is_an_error(tmp_path):
    (tmp_path / "v.jsonl").write_text("", encoding="utf-8")
    (tmp_path / "t.jsonl").write_text('{"question": "q", "answer": "a"}\n', encoding="utf-8")
    (tmp_path / "b.yaml").write_text("name: empty_val\ndata: {validation: v.jsonl, test: t.jsonl}\n"
                                     "prompt: '{question}'\nmetric: exact_match\n", encoding="utf-8")
    with pytest.raises(UserInputError, match="v.jsonl holds no rows"):
        get_benchmark(str(tmp_path / "b.yaml")).prepare(tmp_path / "files")


def test_stratify_must_name_an_item_column(tmp_path):
    (tmp_path / "d.jsonl").write_text('{"question": "q", "answer": "a"}\n' * 4, encoding="utf-8")
    (tmp_path / "s.yaml").write_text("name: strat_bad\ndata: {file: d.jsonl, stratify: topic}\n"
                                     "prompt: '{question}'\nmetric: exact_match\n", encoding="utf-8")
    with pytest.raises(UserInputError, match="stratify: topic"):
        get_benchmark(str(tmp_path / "s.yaml")).prepare(tmp_path / "files")
