"""Issue 45: a benchmark whose data are local files is read once at start-up -- the rows ``check_data`` read and
checked are the ones prepared, frozen and evaluated -- and an edited file is prepared again.

Before: start-up read and split the files (``check_data``), then the scenario's ``benchmark_data`` stage read
and split them again (``prepare``) -- or, once ``FT_FILE_PATH/benchmarks/<key>`` was prepared, not at all: after
the user edited the file, the ``--dataset`` scan ran against the new rows while the session evaluated the old.
Driven through the real start-up (:func:`ftagent.finetune.start.start` and its ``FT_SCEN`` builder's prepare).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ftagent.benchmarks.adapter import Benchmark
from ftagent.benchmarks.registry import BENCHMARKS
from tests.helpers.model_files import base_weights, write_model

BENCH = """\
name: my_read_once
description: "Reply with the number only."
data: {file: my_read_once.jsonl}
prompt: "{question}"
answer: answer
metric: exact_match
related_datasets: [demo_add]
"""


@pytest.fixture(autouse=True)
def _fresh(monkeypatch, tmp_path):
    monkeypatch.setattr(BENCHMARKS, "_user", {})
    monkeypatch.delenv("FT_BENCHMARK_PATHS", raising=False)
    monkeypatch.setenv("FT_FILE_PATH", str(tmp_path / "ft"))
    monkeypatch.setenv("FT_PLANNER", "heuristic")
    monkeypatch.setenv("FT_DATASET", "demo_add")


@pytest.fixture
def reads(monkeypatch) -> list[str]:
    """Every read of a benchmark's source rows (the loader behind ``check_data`` and ``prepare``)."""
    seen: list[str] = []
    real = Benchmark.raw_subsets

    def counted(self, root):
        seen.append(self.key)
        return real(self, root)

    monkeypatch.setattr(Benchmark, "raw_subsets", counted)
    return seen


def _bench(folder: Path, tag: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "my_read_once.jsonl").open("w", encoding="utf-8") as fh:
        for i in range(12):
            fh.write(json.dumps({"question": f"{tag}: what is {i} + {i}?", "answer": str(2 * i)}) + "\n")
    path = folder / "my_read_once.yaml"
    path.write_text(BENCH, encoding="utf-8")
    return path


def _start_and_prepare(bench: Path, model: Path):
    from ftagent.finetune.start import start

    startup = start(benchmark=str(bench), base_model=str(model), file_settings={})
    return startup.run, startup.prepare(lambda event: None)


def test_a_local_benchmark_is_read_once_and_its_checked_rows_are_the_sessions(tmp_path, reads):
    bench = _bench(tmp_path / "b", "first")
    model = write_model(tmp_path / "model", base_weights(0))
    run, prepared = _start_and_prepare(bench, model)
    assert reads == ["my_read_once"]  # before: 2 (check_data, then prepare)
    root, _digest = prepared.benchmark_copy
    assert run.adapter.load_items(root, "validation")[0]["question"].startswith("first:")


def test_an_edited_benchmark_file_is_prepared_again_for_the_next_session(tmp_path, reads):
    bench = _bench(tmp_path / "b", "first")
    model = write_model(tmp_path / "model", base_weights(0))
    _start_and_prepare(bench, model)
    _bench(tmp_path / "b", "edited")
    run, prepared = _start_and_prepare(bench, model)
    root, _digest = prepared.benchmark_copy
    questions = [item["question"] for item in run.adapter.load_items(root, "validation")]
    assert questions and all(q.startswith("edited:") for q in questions)  # before: the first file's rows
    assert reads == ["my_read_once", "my_read_once"]  # one read per start


def test_an_eval_without_a_session_prepares_an_edited_file_again(tmp_path, reads):
    """``ftagent eval``'s path (:func:`prepare_benchmark`, no start-up rows): the file is read where it is."""
    from ftagent.benchmarks import open_benchmark
    from ftagent.benchmarks.prepared import prepare_benchmark

    bench = _bench(tmp_path / "b", "first")
    root = tmp_path / "ft" / "benchmarks"
    _key, adapter = open_benchmark(str(bench))
    prepare_benchmark(adapter, root, None)
    _bench(tmp_path / "b", "edited")
    prepare_benchmark(adapter, root, None)
    assert adapter.load_items(root, "validation")[0]["question"].startswith("edited:")  # before: "first:"
