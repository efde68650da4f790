"""Early stop of a diverging run: the watch's rule, the runner's stop, the trainer's feedback and event."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from ftagent.core.errors import ErrorType, StepError, UserInputError
from ftagent.core.settings import load_settings
from ftagent.core.types import CodeResult, ScenarioInfo, ValidationReport
from ftagent.runners.base import RunResult
from ftagent.runners.process import run_process
from ftagent.runners.recording import RecordingRunner
from ftagent.tools.llamafactory.early_stop import DivergenceWatch, EarlyStopRule, remaining_seconds
from ftagent.tools.llamafactory.progress import TrainerLogFollower
from ftagent.tools.llamafactory.trainer import LlamaFactoryTrainer, accepts_stop


def _point(step: int, loss: float, total: int = 100, elapsed: str = "0:00:10") -> dict:
    return {"current_steps": step, "total_steps": total, "loss": loss, "lr": 0.5, "elapsed_time": elapsed}


def _feed(watch: DivergenceWatch, losses: list[float], every: int = 1):
    for i, loss in enumerate(losses, start=1):
        verdict = watch.observe(_point(i * every, loss))
        if verdict is not None:
            return verdict
    return None


def test_nan_and_inf_stop_at_once() -> None:
    for bad in (math.nan, math.inf, -math.inf):
        verdict = _feed(DivergenceWatch(EarlyStopRule()), [2.0, 1.5, bad, 1.0])
        assert verdict is not None and verdict.reason == "nan" and verdict.step == 3
        assert verdict.message().startswith("diverged at step 3/100: loss ")
        assert "lr 0.5" in verdict.message() and "not a finite number" in verdict.message()


def test_sustained_rise_stops_after_patience_steps_and_a_spike_does_not() -> None:
    rule = EarlyStopRule(loss_ratio=3.0, patience_steps=4)
    # best 1.0 at step 2; above 3.0 from step 4 on: stop at step 8 (8 - 4 >= 4)
    verdict = _feed(DivergenceWatch(rule), [2.0, 1.0, 1.2, 5.0, 6.0, 7.0, 9.0, 8.0, 9.0])
    assert verdict is not None and verdict.reason == "rise"
    assert (verdict.step, verdict.best_step, verdict.best_loss, verdict.since_step) == (8, 2, 1.0, 4)
    assert verdict.message() == ("diverged at step 8/100: loss 8, lr 0.5 (above 8× its best 1 at step 2, +7, "
                                 "since step 4)")
    # a spike that comes back under the bar resets the stretch
    assert _feed(DivergenceWatch(rule), [2.0, 1.0, 5.0, 6.0, 7.0, 1.1, 5.0, 5.0, 5.0, 1.0]) is None
    # a loss that only rises a little (below ratio × best) never stops
    assert _feed(DivergenceWatch(rule), [1.0] + [2.9] * 50) is None


def _issue35_curve() -> list[tuple[int, float]]:
    """Issue 35's loop 0, as logged every 10 steps: falling from ~2 to 0.0013 by step 1600, a spike to
    0.0179, back to 0.0057 by step 2000 and still falling."""
    curve = [(s, 2.0 * (0.0013 / 2.0) ** (s / 1600)) for s in range(10, 1610, 10)]  # 2.0 → 0.0013
    spike = [0.0179, 0.0160, 0.0150, 0.0140, 0.0120, 0.0110, 0.0100, 0.0095, 0.0090, 0.0085,
             0.0080, 0.0078, 0.0075, 0.0072, 0.0070, 0.0068, 0.0066, 0.0064, 0.0062, 0.0061,
             0.0060, 0.0059, 0.0059, 0.0058, 0.0058, 0.0058, 0.0057, 0.0057, 0.0057, 0.0057,
             0.0057, 0.0057, 0.0057, 0.0057, 0.0057, 0.0057, 0.0057, 0.0057, 0.0057, 0.0057]
    return curve + [(1600 + 10 * i, loss) for i, loss in enumerate(spike, start=1)]


def test_a_converged_run_near_zero_is_not_stopped_by_a_relative_spike() -> None:
    """Issue 35: 0.0013 → 0.0179 → 0.0057 is 4-14× the best, but only 0.017 nats: not a divergence."""
    watch = DivergenceWatch(EarlyStopRule())
    points = _issue35_curve()
    assert points[-1][0] == 2000 and points[159] == (1600, pytest.approx(0.0013))
    for step, loss in points:
        assert watch.observe({"current_steps": step, "total_steps": 2000, "loss": loss, "lr": 1e-4}) is None
    assert watch.verdict is None
    # the same shape a whole nat high still stops: the floor is absolute, the ratio still applies above it
    watch = DivergenceWatch(EarlyStopRule())
    verdict = None
    for step, loss in [(10, 2.0), (20, 0.2)] + [(20 + 10 * i, 1.5) for i in range(1, 6)]:
        verdict = verdict or watch.observe({"current_steps": step, "total_steps": 2000, "loss": loss})
    assert verdict is not None and verdict.reason == "rise" and verdict.since_step == 30


def test_the_stretch_counts_only_points_whose_smoothed_curve_is_above_the_bar_too() -> None:
    """A point counts only when its loss and the smoothed curve (EMA) are both above the bar: a short
    plateau just over the bar is not a stretch until the curve gets there (on main: stopped at step 8)."""
    rule = EarlyStopRule(loss_ratio=3.0, patience_steps=4)
    assert _feed(DivergenceWatch(rule), [1.0, 1.0, 1.0] + [3.1] * 5 + [1.0]) is None  # EMA 2.05 … 3.03
    verdict = _feed(DivergenceWatch(rule), [1.0, 1.0, 1.0] + [3.1] * 12)
    assert verdict is not None and (verdict.since_step, verdict.step) == (8, 12)


def test_patience_counts_optimizer_steps_not_points() -> None:
    rule = EarlyStopRule(loss_ratio=2.0, patience_steps=20)
    verdict = _feed(DivergenceWatch(rule), [1.0, 5.0, 5.0, 5.0, 5.0], every=10)  # points at steps 10..50
    assert verdict is not None and (verdict.since_step, verdict.step) == (20, 40)


def test_off_switch_and_only_one_verdict() -> None:
    assert _feed(DivergenceWatch(EarlyStopRule(enabled=False)), [1.0, math.nan]) is None
    watch = DivergenceWatch(EarlyStopRule())
    assert watch.observe(_point(1, math.nan)) is not None and watch.observe(_point(2, math.nan)) is None
    assert watch.observe({"current_steps": 3, "total_steps": 100}) is None  # a line without a loss


def test_settings_reach_the_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FT_EARLY_STOP", "false")
    monkeypatch.setenv("FT_EARLY_STOP_LOSS_RATIO", "5")
    monkeypatch.setenv("FT_EARLY_STOP_PATIENCE_STEPS", "7")
    rule = EarlyStopRule.from_settings(load_settings().ft)
    assert (rule.enabled, rule.loss_ratio, rule.patience_steps) == (False, 5.0, 7)
    monkeypatch.setenv("FT_EARLY_STOP_LOSS_RATIO", "0.5")
    with pytest.raises(UserInputError, match="FT_EARLY_STOP_LOSS_RATIO=0.5"):
        load_settings()


def test_remaining_time_is_steps_left_over_the_rate_so_far() -> None:
    assert remaining_seconds(_point(25, 1.0, total=100, elapsed="0:00:50")) == pytest.approx(150.0)
    assert remaining_seconds({"current_steps": 0, "remaining_time": "0:01:00"}) == 60.0


def test_follower_hands_every_point_to_the_watcher_and_rereads_a_replaced_log(tmp_path: Path) -> None:
    log = tmp_path / "trainer_log.jsonl"
    log.write_text("".join(json.dumps(_point(s, 1.0)) + "\n" for s in range(1, 40)))  # an older, longer run
    seen: list[int] = []
    with TrainerLogFollower(tmp_path, lambda p: None, poll_s=0.05, min_interval_s=60,
                            on_each=lambda p: seen.append(p["current_steps"])):
        time.sleep(0.2)
        log.write_text("".join(json.dumps(_point(s, 1.0)) + "\n" for s in range(1, 6)))  # the new run's log
        time.sleep(0.3)
    assert seen == [1, 2, 3, 4, 5]  # all of them (unthrottled), none of the old run's


def test_run_process_stop_ends_the_process_group_early(tmp_path: Path) -> None:
    stop = threading.Event()
    script = ("import subprocess, sys, time\n"
              "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
              "print('child', child.pid, flush=True)\ntime.sleep(120)\n")
    threading.Timer(1.5, stop.set).start()
    start = time.monotonic()
    result = run_process([sys.executable, "-c", script], cwd=tmp_path, env={"PATH": "/usr/bin:/bin"},
                         timeout=60, log_file=tmp_path / "run.log", stop=stop)
    took = time.monotonic() - start
    assert took < 20 and not result.timed_out  # (the exit status is the tool's: -15, or what the supervisor says)
    log = (tmp_path / "run.log").read_text()
    assert "[ftagent] stopped on request" in log
    child = int(log.split("child ")[1].split()[0])
    alive = subprocess.run(["kill", "-0", str(child)], capture_output=True).returncode == 0
    assert not alive  # the grandchild went with the group


class _DivergingRunner:
    """Writes a trainer_log.jsonl whose loss explodes, until ftagent sets ``stop`` (like a real run)."""

    name = "diverging"
    stops_on_event = True  # the runner capability (runners/base.py): run() takes ``stop``

    def __init__(self, losses: list[float], stoppable: bool = True) -> None:
        self.losses, self.calls = losses, []
        if not stoppable:  # a plug-in that declares nothing: its run() has no ``stop``
            self.stops_on_event = False
            self.run = self._run_unstoppable  # type: ignore[method-assign]

    def run(self, cmd, *, tool, workdir, env=None, mounts=None, gpus=None, timeout=None, log_file=None,
            stop=None):
        return self._write(cmd, env, log_file, stop)

    def _run_unstoppable(self, cmd, *, tool, workdir, env=None, mounts=None, gpus=None, timeout=None,
                         log_file=None):
        return self._write(cmd, env, log_file, None)

    def _write(self, cmd, env, log_file, stop):
        config = yaml.safe_load(Path(cmd[-1]).read_text())
        self.calls.append({"cmd": cmd, "env": dict(env or {}), "config": config})
        out = Path(config["output_dir"])
        out.mkdir(parents=True, exist_ok=True)
        for step in getattr(self, "checkpoints", ()):  # HF Trainer's save_steps folders (the run writes them)
            (out / f"checkpoint-{step}").mkdir()
            (out / f"checkpoint-{step}" / "config.json").write_text("{}")
            (out / f"checkpoint-{step}" / "model.safetensors").write_text("")
        Path(log_file).write_text("training...\n")
        total = len(self.losses)
        with open(out / "trainer_log.jsonl", "a") as fh:
            for step, loss in enumerate(self.losses, start=1):
                fh.write(json.dumps({"current_steps": step, "total_steps": total, "loss": loss, "lr": 10.0,
                                     "elapsed_time": f"0:00:{step:02d}"}) + "\n")
                fh.flush()
                if stop is not None and stop.wait(0.1):
                    return RunResult(exit_code=-15, duration_s=0.1, log_file=str(log_file))
        (out / "config.json").write_text("{}")
        (out / "model.safetensors").write_text("")
        return RunResult(exit_code=0, duration_s=0.1, log_file=str(log_file))


class _Ctx:
    def __init__(self) -> None:
        self.events: list = []

    def emit(self, event) -> None:
        self.events.append(event)

    def limit(self, seconds: float) -> float:
        return seconds


def _trainer_setup(tmp_path: Path):
    ws = tmp_path / "loop_0"
    ws.mkdir()
    (ws / "data.json").write_text("[]")
    config = {"stage": "sft", "do_train": True, "finetuning_type": "full", "learning_rate": 10.0,
              "output_dir": str(ws / "output"), "model_name_or_path": "/models/m"}
    (ws / "train.yaml").write_text(yaml.safe_dump(config))
    scenario = ScenarioInfo(benchmark="demo", base_model="m", base_model_path="/models/m", file_path=str(tmp_path),
                            workspace_root=str(tmp_path))
    report = ValidationReport(passed=True, config_path=str(ws / "train.yaml"))
    return ws, scenario, report


def _output(ws: Path) -> Path:
    """The full training's model folder: its own fresh folder beside the workspace (issue 39, red team B1/B2)."""
    return ws.parent / "train" / ws.name / "run" / "output"


def test_trainer_stops_a_diverging_run_and_says_where(tmp_path: Path) -> None:
    ws, scenario, report = _trainer_setup(tmp_path)
    losses = [3.0, 2.0, 1.0] + [50.0] * 197  # 200 steps; rises at step 4, patience 20 → stop at step 24
    runner = _DivergingRunner(losses)
    ctx = _Ctx()
    trainer = LlamaFactoryTrainer(scenario, load_settings(file_path=str(tmp_path)), RecordingRunner(runner,
                                                                                                   lambda e: None))
    with pytest.raises(StepError) as err:
        trainer.train(CodeResult(workspace=str(ws)), report, ctx)  # type: ignore[arg-type]
    exc = err.value
    assert exc.error_type is ErrorType.DIVERGED
    assert exc.message.startswith("training diverged at step 24/200: loss 50, lr 10 (above 50× its best 1 at step 3")
    assert "no checkpoint saved before the rise" in exc.message and "does not come back" not in exc.suggestion
    facts = exc.details["early_stop"]
    assert facts["step"] == 24 and facts["stopped"] is True
    assert [p["loss"] for p in exc.details["loss_history"][:4]] == [3.0, 2.0, 1.0, 50.0]  # the planner's loss table
    assert facts["saved_s"] == pytest.approx((200 - 24) * 24 / 24)  # 1 s/step so far, 176 steps left
    lines = (_output(ws) / "trainer_log.jsonl").read_text().splitlines()
    assert 24 <= len(lines) < 150  # stopped well before 200 (the follower polls once a second); the log is kept
    event = next(e for e in ctx.events if getattr(e, "type", "") == "training")
    assert event.early_stop.step == 24 and event.early_stop.saved_s == facts["saved_s"]
    assert len(event.loss_history) == len(lines)
    # the full run was told not to hide NaN losses; train.yaml stays as validated
    assert runner.calls[0]["config"]["logging_nan_inf_filter"] is False
    assert "logging_nan_inf_filter" not in yaml.safe_load((ws / "train.yaml").read_text())


def test_a_stopped_run_with_a_checkpoint_before_the_rise_is_evaluated(tmp_path: Path) -> None:
    """The last checkpoint saved before the loss left its bar is the loop's model, not a lost loop."""
    ws, scenario, report = _trainer_setup(tmp_path)
    runner = _DivergingRunner([3.0, 2.0, 1.0] + [50.0] * 60)
    runner.checkpoints = (2, 3, 10)  # saved by the run; 10 is after the rise (step 4): not good
    ctx = _Ctx()
    trainer = LlamaFactoryTrainer(scenario, load_settings(file_path=str(tmp_path)),
                                  RecordingRunner(runner, lambda e: None))
    result = trainer.train(CodeResult(workspace=str(ws)), report, ctx)  # type: ignore[arg-type]
    assert result.model_path == str(_output(ws) / "checkpoint-3") and result.finetuning_type == "full"
    event = next(e for e in ctx.events if getattr(e, "type", "") == "training")
    assert event.early_stop is not None and event.early_stop.since_step == 4


def test_a_runner_that_cannot_stop_still_yields_the_feedback(tmp_path: Path) -> None:
    ws, scenario, report = _trainer_setup(tmp_path)
    runner = _DivergingRunner([2.0, 1.0, math.nan, math.nan], stoppable=False)
    assert not accepts_stop(runner) and accepts_stop(RecordingRunner(_DivergingRunner([1.0]), lambda e: None))
    with pytest.raises(StepError) as err:
        LlamaFactoryTrainer(scenario, load_settings(file_path=str(tmp_path)), runner).train(
            CodeResult(workspace=str(ws)), report, None)
    assert err.value.error_type is ErrorType.DIVERGED and "diverged at step 3/4: loss nan" in err.value.message
    assert err.value.details["early_stop"]["saved_s"] == 0.0 and "ran to its end" in err.value.message


def test_early_stop_off_trains_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FT_EARLY_STOP", "false")
    ws, scenario, report = _trainer_setup(tmp_path)
    runner = _DivergingRunner([1.0] + [50.0] * 30)
    result = LlamaFactoryTrainer(scenario, load_settings(file_path=str(tmp_path)), runner).train(
        CodeResult(workspace=str(ws)), report, None)
    # the validated config as it is, with the run's own paths (its fresh folder beside the workspace)
    run_config = _output(ws).parent.parent / "inputs" / "train.yaml"
    assert len(result.loss_history) == 31 and runner.calls[0]["cmd"][-1] == str(run_config)
    assert "logging_nan_inf_filter" not in yaml.safe_load(run_config.read_text())


def test_the_report_counts_the_saved_training_time(tmp_path: Path) -> None:
    from ftagent.engine.event_log import EventLog
    from ftagent.engine.events import EarlyStopFacts, LoopEnd, SessionStart, TrainingEvent
    from ftagent.views.report import build_report, render_markdown

    session = tmp_path / "sess"
    log = EventLog(session / "events.jsonl")
    log.emit(SessionStart(session_id="sess", benchmark="demo_add"))
    for loop, saved in ((0, 120.4), (1, None), (2, 30.0)):
        facts = EarlyStopFacts(reason="rise", step=24, loss=50.0, saved_s=saved) if saved else None
        log.emit(TrainingEvent(loop=loop, output_dir=str(tmp_path), early_stop=facts))
        log.emit(LoopEnd(loop=loop, status="failed" if saved else "succeeded"))
    report = build_report(session)
    assert report.early_stops == 2 and report.early_stop_saved_s == pytest.approx(150.4)
    assert "- early stop: 2 diverging run(s) stopped, ~2 min 30 s of training saved" in render_markdown(report)


def test_the_stop_goes_to_a_runner_by_its_declared_capability_not_its_signature() -> None:
    """Issue 45: whether the trainer may pass ``stop`` is what the runner class declares (``stops_on_event``),
    read through wrappers; a ``run`` that merely has a ``stop`` parameter declares nothing (before: the trainer
    inspected ``runner.run``'s signature, and a wrapper's ``**kwargs``)."""
    from ftagent.runners.base import capabilities
    from ftagent.runners.conda import CondaRunner
    from ftagent.runners.docker import DockerRunner
    from ftagent.runners.local import LocalRunner

    class Undeclared:
        def run(self, cmd, *, tool, workdir, env=None, mounts=None, gpus=None, timeout=None, log_file=None,
                stop=None):
            raise AssertionError("not run here")

    class Declared(Undeclared):
        stops_on_event = True

    assert not accepts_stop(Undeclared()) and accepts_stop(Declared())
    assert accepts_stop(RecordingRunner(Declared(), lambda e: None))
    assert not accepts_stop(RecordingRunner(Undeclared(), lambda e: None))
    assert all(capabilities(cls).stops_on_event for cls in (LocalRunner, CondaRunner, DockerRunner))
    assert accepts_stop(SimpleNamespace(inner=Declared()))  # any wrapper with an inner runner (a trial's slot)
