"""make bench's stages section (issue 40): what it reads of a session's events (tests/bench/stage_bench.py)."""

from __future__ import annotations

from pathlib import Path

from ftagent.engine.event_log import EventLog
from ftagent.engine.events import BenchmarkResult, StepEnd, TrainingEvent
from tests.bench.stage_bench import loop_facts


def _session(tmp_path: Path, config: dict, logged: list[int], runtime: float) -> Path:
    log = EventLog(tmp_path / "events.jsonl")
    log.emit(TrainingEvent(loop=1, output_dir="o", config=config, train_runtime_s=runtime,
                           loss_history=[{"step": s, "loss": 1.0} for s in logged]))
    for step, took in (("code", 1.0), ("validate", 2.0), ("train", 30.0), ("evaluate", 9.0)):
        log.emit(StepEnd(loop=1, step=step, status="ok", duration_s=took))
    log.emit(BenchmarkResult(loop=1, split="validation", score=97.5, benchmark="demo_add", core_metric="accuracy"))
    return tmp_path


def test_a_max_steps_run_is_timed_per_optimizer_step_not_per_logged_step(tmp_path: Path) -> None:
    # the bench's own SFT continuation: 379 steps, logged every 10 (the last log at 370)
    facts = loop_facts(_session(tmp_path, {"max_steps": 379, "logging_steps": 10}, list(range(10, 371, 10)), 104.31),
                       1)
    assert facts["steps"] == 379 and abs(facts["s_per_step"] - 104.31 / 379) < 1e-9
    assert facts["wall_s"] == 33.0 and facts["val"] == 97.5  # sampling + code + validate + train, not evaluate


def test_an_epochs_run_is_timed_by_its_last_logged_step(tmp_path: Path) -> None:
    facts = loop_facts(_session(tmp_path, {"num_train_epochs": 2.0, "logging_steps": 1}, list(range(1, 21)), 9.72), 1)
    assert facts["steps"] == 20 and abs(facts["s_per_step"] - 0.486) < 1e-9
