"""Issue 34 item 12: a start that fails (exit 2) writes nothing -- not into a ``--path`` target either.

Before: ``--path`` to a snapshot taken before loop 0 took the session's lock (``.lock``,
``.lock.holder.json`` added to the target), checked it out (later snapshots dropped) and turned on the
child registry under ``FT_FILE_PATH`` before saying it cannot be resumed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ftagent.benchmarks import get_benchmark
from ftagent.engine.session import Session
from ftagent.finetune.state import FinetuneSessionState


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def test_a_snapshot_without_a_scenario_is_refused_before_anything_is_written(tmp_path):
    session = Session.create(tmp_path / "log", config={"run": {"benchmark": "demo_add",
                                                               "base_model": "builtin/tiny-qwen2"}},
                             state_cls=FinetuneSessionState)
    session.save(0, 0, "propose")
    session.save(0, 1, "code")
    before = _tree(session.dir)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FT_", "CHAT_", "OPENAI_"))}
    env.update(FT_FILE_PATH=str(tmp_path / "ft"), LOG_PATH=str(tmp_path / "log"),
               WORKSPACE_PATH=str(tmp_path / "ws"), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    for extra in ([], ["--no-checkout"]):
        res = subprocess.run([sys.executable, "-m", "ftagent", "llm_finetune", "--path",
                              str(session.dir / "__session__" / "0" / "0_propose"), *extra],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert res.returncode == 2, res.stderr[-2000:]
        assert "the snapshot has no scenario" in res.stderr and "Traceback" not in res.stderr
        assert _tree(session.dir) == before  # no lock files, no checkout
        assert [p.name for p in (tmp_path / "log").iterdir()] == [session.dir.name]  # no fork
        assert not (tmp_path / "ft").exists() and not (tmp_path / "ws").exists()


def test_a_contaminated_dataset_file_is_refused_before_anything_is_written(tmp_path):
    """Before: the copy was registered (``FT_FILE_PATH/datasets/.<name>.lock`` left), the model built and
    the data sets and benchmark prepared before the scan refused the file (issue 34.12)."""
    import json

    questions = [f"How many apples are left when a farmer with {i} baskets of {i + 7} apples sells {i + 3} "
                 f"of them at the market on day {i}?" for i in range(1, 13)]
    (tmp_path / "bench.jsonl").write_text("".join(json.dumps({"question": q, "answer": str(i)}) + "\n"
                                                  for i, q in enumerate(questions)), encoding="utf-8")
    (tmp_path / "bench.yaml").write_text("name: apples_bench\ndata: {file: bench.jsonl}\nprompt: '{question}'\n"
                                         "answer: answer\nmetric: exact_match\n", encoding="utf-8")
    rows = [{"instruction": q, "input": "", "output": "7"} for q in questions]  # every benchmark item
    (tmp_path / "mine.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    ft = tmp_path / "ft"
    (ft / "datasets").mkdir(parents=True)
    (ft / "datasets" / "dataset_info.json").write_text('{"demo_add": {"note": "a catalogue"}}\n', encoding="utf-8")
    before = _tree(ft)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FT_", "CHAT_", "OPENAI_"))}
    env.update(FT_FILE_PATH=str(ft), LOG_PATH=str(tmp_path / "log"), WORKSPACE_PATH=str(tmp_path / "ws"),
               HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    res = subprocess.run([sys.executable, "-m", "ftagent", "llm_finetune", "--benchmark", "./bench.yaml",
                          "--base-model", "builtin/tiny-qwen2", "--dataset", "./mine.jsonl", "--loop-n", "1"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 2, res.stderr[-2000:]
    assert "contain items of the benchmark's validation or test split" in res.stderr and "Traceback" not in res.stderr
    assert _tree(ft) == before  # no copy, no .mine.lock, the catalogue as it was, no models/ or benchmarks/
    assert not (tmp_path / "log").exists() and not (tmp_path / "ws").exists()


def test_a_contaminated_file_is_refused_before_the_copy_when_a_builtin_benchmark_is_prepared(tmp_path):
    """A built-in benchmark prepared by an earlier start: its items are read from the prepared folder (no
    write) and the file is refused before it is copied or locked (issue 34.12)."""
    import json

    import pytest

    from ftagent.benchmarks.prepared import is_prepared, prepare_benchmark
    from ftagent.core.errors import UserInputError
    from ftagent.core.settings import load_settings
    from ftagent.finetune.resolve import resolve_run
    from ftagent.tools.llamafactory.data_script import benchmark_items_for

    ft = tmp_path / "ft"
    settings = load_settings(target_benchmark="demo_add", base_model="builtin/tiny-qwen2", planner="heuristic",
                             file_path=ft, benchmark_limit=6, dataset=str(tmp_path / "mine.jsonl"))
    assert not is_prepared(ft / "benchmarks", "demo_add", 6)
    prepare_benchmark(get_benchmark("demo_add"), ft / "benchmarks", 6)
    assert is_prepared(ft / "benchmarks", "demo_add", 6) and not is_prepared(ft / "benchmarks", "demo_add", 5)
    items = benchmark_items_for("demo_add", ft, ["question"])  # demo_add's input column
    rows = [{"instruction": fields[0], "input": "", "output": "1"} for fields in items.values()]
    (tmp_path / "mine.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    before = _tree(ft)
    with pytest.raises(UserInputError, match="contain items of the benchmark's validation or test split"):
        resolve_run(settings)
    assert _tree(ft) == before and not (ft / "datasets").exists()
