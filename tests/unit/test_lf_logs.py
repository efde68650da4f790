"""Loss-history parsing (real LLaMA-Factory outputs) and failure classification."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from ftagent.core.errors import ErrorType
from ftagent.tools.llamafactory.logs import (
    classify_failure,
    finite_loss_steps,
    parse_trainer_log,
    parse_trainer_state,
    read_loss_history,
    relevant_lines,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llamafactory"


def test_full_run_history_from_state_and_log() -> None:
    points, summary = read_loss_history(FIXTURES / "full")
    assert [p.step for p in points] == list(range(10, 101, 10))
    assert all(p.loss is not None and p.lr is not None and p.epoch is not None for p in points)
    assert points[0].loss > points[-1].loss
    assert summary["train_runtime"] > 0 and "train_loss" in summary
    # the jsonl alone gives the same steps: its final line has no loss and is skipped
    log_points = parse_trainer_log(FIXTURES / "full" / "trainer_log.jsonl")
    assert [p.step for p in log_points] == [p.step for p in points]
    assert [p.loss for p in log_points] == [p.loss for p in points]


def test_lora_history_merges_eval_loss_into_steps() -> None:
    points, _ = read_loss_history(FIXTURES / "lora")
    assert [p.step for p in points] == [5, 10, 15, 20, 25, 30]
    by_step = {p.step: p for p in points}
    assert by_step[15].eval_loss is not None and by_step[15].loss is not None
    assert by_step[30].eval_loss is not None and by_step[10].eval_loss is None
    state_points, _ = parse_trainer_state(FIXTURES / "lora" / "trainer_state.json")
    assert sum(p.eval_loss is not None for p in state_points) == 2


def test_half_written_and_missing_files(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "lora" / "trainer_log.jsonl", tmp_path / "trainer_log.jsonl")
    with (tmp_path / "trainer_log.jsonl").open("a") as fh:
        fh.write('{"current_steps": 35, "loss": 1.')  # killed writer
    points, summary = read_loss_history(tmp_path)
    assert points[-1].step == 30 and summary == {}
    assert read_loss_history(tmp_path / "nothing") == ([], {})


def test_finite_loss_steps_rejects_nan_and_step_zero(tmp_path: Path) -> None:
    rows = [{"current_steps": 0, "loss": 1.0}, {"current_steps": 1, "loss": float("nan")},
            {"current_steps": 2, "eval_loss": 3.0}, {"current_steps": 3, "total_steps": 3}]
    (tmp_path / "trainer_log.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    points = parse_trainer_log(tmp_path / "trainer_log.jsonl")
    assert [p.step for p in points] == [0, 1, 2] and math.isnan(points[1].loss)
    assert finite_loss_steps(points) == []
    rows.append({"current_steps": 4, "loss": 2.5})
    (tmp_path / "trainer_log.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    assert [p.step for p in finite_loss_steps(parse_trainer_log(tmp_path / "trainer_log.jsonl"))] == [4]


def test_real_bad_scheduler_log_is_config() -> None:
    log = (FIXTURES / "logs" / "bad_scheduler.log").read_text()
    info = classify_failure(log, exit_code=1)
    assert info.error_type is ErrorType.CONFIG
    assert "bogus is not a valid SchedulerType" in info.message
    assert info.log_tail.startswith("Traceback") and "SchedulerType" in info.log_tail


_TRACE = "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n    run()\n"


@pytest.mark.parametrize(("log", "exit_code", "expected"), [
    (_TRACE + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", 1, ErrorType.OOM),
    ("[INFO] Running training\nsome progress\n", 137, ErrorType.OOM),
    (_TRACE + "RuntimeError: [enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate "
              "memory: you tried to allocate 123 bytes. Error code 12 (Cannot allocate memory)", 1, ErrorType.OOM),
    (_TRACE + "ModuleNotFoundError: No module named 'deepspeed'", 1, ErrorType.ENV),
    ("bash: llamafactory-cli: command not found", 127, ErrorType.ENV),
    (_TRACE + "ValueError: Cannot find valid samples, check `data/README.md` for the data format.", 1,
     ErrorType.DATA),
    (_TRACE + "ValueError: Undefined dataset foo in dataset_info.json.", 1, ErrorType.DATA),
    (_TRACE + '  File "/v/site-packages/llamafactory/data/loader.py", line 131, in _load_single_dataset\n'
              'ValueError: Instruction "train" corresponds to nothing!', 1, ErrorType.DATA),
    (_TRACE + "ValueError: Please specify `lora_target` in LoRA training.", 1, ErrorType.CONFIG),
    (_TRACE + "TypeError: __init__() got an unexpected keyword argument 'foo'", 1, ErrorType.CONFIG),
    ("no error text at all", 3, ErrorType.UNKNOWN),
])
def test_classify_sample_logs(log: str, exit_code: int, expected: ErrorType) -> None:
    info = classify_failure(log, exit_code=exit_code)
    assert info.error_type is expected
    assert info.suggestion


def test_timeout_wins_and_tail_is_bounded() -> None:
    log = "\n".join(f"step {i}" for i in range(5000))
    info = classify_failure(log, exit_code=None, timed_out=True, timeout_s=60)
    assert info.error_type is ErrorType.TIMEOUT and "60" in info.message
    assert len(relevant_lines(log)) <= 4100 and "step 4999" in relevant_lines(log)
