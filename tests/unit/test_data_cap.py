"""FT_UPPER_DATA_SIZE_LIMIT is enforced on the full run (deterministic down-sampling), and a data.json that
is not UTF-8 is a DATA error (issue #22.5/6)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from ftagent.core.errors import ErrorType, StepError
from ftagent.core.types import CodeResult, Hypothesis
from ftagent.tools.llamafactory import data_script, trainer
from ftagent.tools.llamafactory.data_script import DataProcessor


class _Ctx:
    def __init__(self) -> None:
        self.events: list = []

    def emit(self, event) -> None:
        self.events.append(event)

    def limit(self, seconds: float) -> float:
        return seconds


def _rows(n: int) -> list[dict]:
    return [{"instruction": f"q{i}", "input": "", "output": f"a{i}"} for i in range(n)]


def _processor(tmp_path: Path, cap: int, monkeypatch: pytest.MonkeyPatch, rows: list[dict] | bytes) -> DataProcessor:
    def fake_run(workspace, runner, timeout, *, debug, env, mounts):  # the script's output, written as it would
        data = rows if isinstance(rows, bytes) else json.dumps(rows).encode()
        (Path(workspace) / "data.json").write_bytes(data)

    monkeypatch.setattr(trainer, "run_data_processing", fake_run)
    monkeypatch.setattr(DataProcessor, "_scan", lambda self, rows, ctx=None, dataset="": None)
    settings = SimpleNamespace(ft=SimpleNamespace(debug_data_processing_timeout=60, data_processing_timeout=60,
                                                  strong_models=[], weak_models=[], api_max_workers=1),
                               llm=SimpleNamespace(embedding_model=""))
    scenario = SimpleNamespace(upper_data_size_limit=cap, dataset_root=None, base_model_path=None)
    return DataProcessor(scenario, settings, runner=None, input_columns=["question"], answer_column="answer")


def _prepare(proc: DataProcessor, ws: Path, debug: bool = False) -> tuple[int, _Ctx]:
    ws.mkdir(parents=True, exist_ok=True)
    ctx = _Ctx()
    n = proc.prepare(CodeResult(workspace=str(ws)), Hypothesis(hypothesis="h"), trace=None, ctx=ctx, debug=debug)
    return n, ctx


def test_rows_above_the_cap_are_down_sampled_deterministically(tmp_path, monkeypatch):
    proc = _processor(tmp_path, 25, monkeypatch, _rows(200))
    n1, ctx = _prepare(proc, tmp_path / "a")
    n2, _ = _prepare(proc, tmp_path / "b")
    first = json.loads((tmp_path / "a" / "data.json").read_text())
    second = json.loads((tmp_path / "b" / "data.json").read_text())
    assert n1 == n2 == 25 and first == second  # the same rows every time
    assert len({r["instruction"] for r in first}) == 25 and all(r in _rows(200) for r in first)
    assert first != _rows(200)[:25]  # a sample across the file, not its head
    assert any("had 200 rows; sampled 25" in getattr(e, "text", "") for e in ctx.events)


def test_rows_within_the_cap_and_debug_runs_are_left_alone(tmp_path, monkeypatch):
    proc = _processor(tmp_path, 25, monkeypatch, _rows(25))
    assert _prepare(proc, tmp_path / "a")[0] == 25
    proc = _processor(tmp_path, 25, monkeypatch, _rows(40))
    n, ctx = _prepare(proc, tmp_path / "b", debug=True)
    assert n == 40 and not ctx.events  # the debug round checks the script; the cap applies to the full run


def test_invalid_utf8_in_data_json_is_a_data_error(tmp_path, monkeypatch):
    bad = b'[{"instruction": "caf' + b"\xe9" + b'", "input": "", "output": "x"}]'
    proc = _processor(tmp_path, 25, monkeypatch, bad)
    with pytest.raises(StepError) as info:
        _prepare(proc, tmp_path / "a")
    assert info.value.error_type is ErrorType.DATA and "not valid UTF-8" in str(info.value)
    assert data_script.DATA_FILE == "data.json"
