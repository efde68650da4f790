"""Issue 34 item 10: every input YAML has a size limit and an alias-expansion limit; descriptions are capped.

The alias bomb is a real file (548 bytes, 9^9 strings once expanded). Before the fix ``ftagent benchmarks
show`` on it died with a MemoryError traceback (exit 1) under a 3 GB address-space limit; the CLI run
below keeps that limit so a regression fails the test instead of eating the machine's memory.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

import pytest

from ftagent.benchmarks.schema import load_config
from ftagent.core.errors import UserInputError
from ftagent.core.settings import MAX_DESCRIPTION_CHARS, FTSettings
from ftagent.core.yamlio import MAX_YAML_BYTES, load_yaml_text


def _bomb(levels: int = 9) -> str:
    lines = ['  a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"  a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines)


def _bench(tmp_path, extra: str = "", description: str = "d") -> object:
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps({"question": f"q{i}", "answer": str(i)}) + "\n"
                                                 for i in range(20)))
    path = tmp_path / "b.yaml"
    path.write_text(f"name: b_bench\ndescription: {json.dumps(description)}\ndata: {{file: rows.jsonl}}\n"
                    f"prompt: \"{{question}}\"\nmetric: exact_match\n{extra}", encoding="utf-8")
    return path


def _limit_memory():  # runs in the child: a regression raises MemoryError there, not here
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


def test_alias_bomb_in_metric_kwargs_is_refused_quickly_exit_2(tmp_path):
    path = _bench(tmp_path, "metric_kwargs:\n" + _bomb())
    assert path.stat().st_size < 1000
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    started = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "ftagent", "benchmarks", "show", str(path)], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=120, preexec_fn=_limit_memory)
    assert res.returncode == 2, res.stderr[-2000:]
    assert "aliases" in res.stderr and "Traceback" not in res.stderr and str(path) in res.stderr
    assert time.monotonic() - started < 60


def test_aliases_within_the_limit_and_recursive_ones():
    assert load_yaml_text("a: &x {k: 1}\nb: *x\nc: [*x, *x]", "t") == {"a": {"k": 1}, "b": {"k": 1},
                                                                      "c": [{"k": 1}, {"k": 1}]}
    started = time.monotonic()
    with pytest.raises(UserInputError, match="aliases"):
        load_yaml_text("top:\n" + _bomb(12), "t")  # 9^12 values: refused before anything is built
    assert time.monotonic() - started < 5
    with pytest.raises(UserInputError, match="recursive alias"):
        load_yaml_text("a: &x [1, *x]", "t")


def test_a_yaml_over_the_size_limit_is_refused_before_it_is_read(tmp_path):
    path = _bench(tmp_path, description="x" * (MAX_YAML_BYTES + 10))
    with pytest.raises(UserInputError, match=r"bytes, more than the 1,000,000-byte limit") as info:
        load_config(path)
    assert str(path) in str(info.value)


def test_descriptions_are_capped(tmp_path):
    load_config(_bench(tmp_path, description="x" * MAX_DESCRIPTION_CHARS))  # at the cap: fine
    with pytest.raises(UserInputError, match="description"):
        load_config(_bench(tmp_path, description="x" * (MAX_DESCRIPTION_CHARS + 1)))
    with pytest.raises(ValueError, match="benchmark_description"):  # --benchmark-description: exit 2 in the CLI
        FTSettings(benchmark_description="x" * (MAX_DESCRIPTION_CHARS + 1))
