"""Issue 34 item 11: a benchmark YAML and its data files are checked completely before anything is written.

Before: a 1-row data file passed the start-up and failed the baseline (exit 1, a session written); an
unknown ``metric_kwargs`` key reached OpenCompass (two failed baseline runs); a non-UTF-8 YAML was a
``UnicodeDecodeError`` traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ftagent.benchmarks.adapter import Benchmark
from ftagent.benchmarks.schema import load_config
from ftagent.core.errors import UserInputError


def _bench(tmp_path, n_rows: int = 20, extra: str = "", name: str = "e34_bench", metric: str = "exact_match"):
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps({"question": f"{i}+1", "answer": str(i + 1)}) + "\n"
                                                 for i in range(n_rows)))
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\ndata: {{file: rows.jsonl}}\nprompt: \"{{question}}\"\nmetric: {metric}\n"
                    f"related_datasets: [demo_add]\n{extra}")
    return path


def _cli(tmp_path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FT_", "CHAT_", "OPENAI_"))}
    env.update(FT_FILE_PATH=str(tmp_path / "ft"), LOG_PATH=str(tmp_path / "log"),
               WORKSPACE_PATH=str(tmp_path / "ws"), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "ftagent", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)


def test_a_one_row_data_file_is_exit_2_before_anything_is_written(tmp_path):
    path = _bench(tmp_path, n_rows=1, name="one_bench")
    res = _cli(tmp_path, "llm_finetune", "--benchmark", str(path), "--base-model", "builtin/tiny-qwen2",
               "--loop-n", "1")
    assert res.returncode == 2, res.stderr[-3000:]
    assert "no test item" in res.stderr and "at least 2 rows" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "log").exists() or not any((tmp_path / "log").iterdir())  # no session
    assert not (tmp_path / "ft").exists()  # no model built, no benchmark prepared, nothing registered


def _open(path) -> Benchmark:  # what the registry does for a file (without registering it for the process)
    return Benchmark(load_config(path))


def test_an_unknown_metric_kwargs_key_is_refused_when_the_benchmark_is_opened(tmp_path):
    with pytest.raises(UserInputError, match=r"takes no 'ignore_cas'\. Did you mean 'ignore_case'\?"):
        _open(_bench(tmp_path, extra="metric_kwargs: {ignore_cas: true}\n"))
    bench = _open(_bench(tmp_path, extra="metric_kwargs: {ignore_case: true}\n", name="e34_ok_bench"))
    assert bench.evaluator_kwargs == {"ignore_case": True}
    with pytest.raises(UserInputError, match="takes no 'tolerance'.*It takes: no metric_kwargs"):
        _open(_bench(tmp_path, extra="metric_kwargs: {tolerance: 1}\n", name="e34_c_bench", metric="contains"))


def test_a_non_utf8_yaml_is_one_line_exit_2(tmp_path):
    path = _bench(tmp_path)
    path.write_bytes(path.read_bytes() + "description: caf\xe9 au lait\n".encode("latin-1"))
    res = _cli(tmp_path, "benchmarks", "show", str(path))
    assert res.returncode == 2, res.stderr[-3000:]
    assert "not UTF-8 text (byte" in res.stderr and str(path) in res.stderr and "Traceback" not in res.stderr
