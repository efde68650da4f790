"""Experiment tracking (FT_REPORT_TO): the run's name and keys, the tracker's env (secrets to training only)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ftagent.core.errors import UserInputError
from ftagent.core.settings import load_settings
from ftagent.core.types import CodeResult, EvalResult, ScenarioInfo, ValidationReport
from ftagent.runners.base import RunResult
from ftagent.runners.process import passthrough_env
from ftagent.runners.recording import RecordingRunner, purpose_of
from ftagent.tools.llamafactory import tracking
from ftagent.tools.llamafactory.trainer import LlamaFactoryTrainer

SECRET = "wandb-secret-123"


class _Recorder:
    name = "recorder"

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def run(self, cmd, *, tool, workdir, env=None, mounts=None, gpus=None, timeout=None, log_file=None, stop=None):
        self.calls.append({"cmd": cmd, "env": dict(env or {}), "mounts": mounts or []})
        if cmd[0] == "llamafactory-cli":
            config = yaml.safe_load(Path(cmd[-1]).read_text())
            self.calls[-1]["config"] = config
            out = Path(config["output_dir"])
            out.mkdir(parents=True, exist_ok=True)
            (out / "trainer_log.jsonl").write_text(json.dumps({"current_steps": 7, "loss": 1.5}) + "\n")
            (out / "config.json").write_text("{}")
            (out / "model.safetensors").write_text("")
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        Path(log_file).write_text("ok\n")
        return RunResult(exit_code=0, duration_s=0.1, log_file=str(log_file))


def _lf(runner: _Recorder) -> dict:
    """The training call (a tracked run starts with the tracker's check)."""
    return next(c for c in runner.calls if c["cmd"][0] == "llamafactory-cli")


class _Session:
    def __init__(self, d: Path) -> None:
        self.dir = d


class _Ctx:
    def __init__(self, session_dir: Path, session_id: str = "2026-12-03_sess", loop: int = 2) -> None:
        self.session = _Session(session_dir)
        self.state = type("S", (), {"session_id": session_id})()
        self.loop = type("L", (), {"index": loop})()
        self.events: list = []

    def emit(self, event) -> None:
        self.events.append(event)

    def limit(self, seconds: float) -> float:
        return seconds


def _setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, report_to: str):
    monkeypatch.setenv("FT_REPORT_TO", report_to)
    monkeypatch.setenv("WANDB_API_KEY", SECRET)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"file:{tmp_path}/mlruns")
    ws = tmp_path / "ws" / "loop_2"
    ws.mkdir(parents=True)
    (ws / "train.yaml").write_text(yaml.safe_dump({"finetuning_type": "lora", "output_dir": str(ws / "output"),
                                                   "report_to": "none"}))
    scenario = ScenarioInfo(benchmark="demo", base_model="m", base_model_path="/models/m", file_path=str(tmp_path),
                            workspace_root=str(tmp_path / "ws"))
    runner = _Recorder()
    trainer = LlamaFactoryTrainer(scenario, load_settings(file_path=str(tmp_path)), runner)
    return ws, trainer, runner, ValidationReport(passed=True, config_path=str(ws / "train.yaml"))


def test_tensorboard_run_is_named_after_session_and_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws, trainer, runner, report = _setup(tmp_path, monkeypatch, "tensorboard")
    ctx = _Ctx(tmp_path / "log" / "2026-12-03_sess")
    result = trainer.train(CodeResult(workspace=str(ws)), report, ctx)  # type: ignore[arg-type]
    config = _lf(runner)["config"]
    tb_dir = tmp_path / "log" / "2026-12-03_sess" / "tensorboard" / "loop_2"
    assert (config["report_to"], config["run_name"], config["logging_dir"]) == (
        "tensorboard", "2026-12-03_sess-loop2", str(tb_dir))
    assert tb_dir.is_dir() and any(m.source == tb_dir and not m.read_only for m in _lf(runner)["mounts"])
    assert yaml.safe_load((ws / "train.yaml").read_text())["report_to"] == "none"  # as validated
    assert "report_to" not in result.config or result.config["report_to"] == "none"
    assert not any(k.startswith("WANDB") for k in _lf(runner)["env"])  # only the chosen tracker's vars
    # after evaluation: the validation score (not the test score) goes to the same run at the last step
    val = EvalResult(split="validation", benchmark="demo", core_metric="accuracy", score=42.5)
    trainer.log_scores(result, val, ctx, baseline=10.0)  # type: ignore[arg-type]
    cmd = runner.calls[-1]["cmd"]
    assert cmd[1].endswith("tracking_script.py") and cmd[2:6] == ["tensorboard", "2026-12-03_sess-loop2",
                                                                  str(tb_dir), "7"]
    assert json.loads(cmd[6]) == {"ftagent/validation/accuracy": 42.5, "ftagent/baseline_validation/accuracy": 10.0}
    assert purpose_of(cmd, "train") == "track"  # not counted as training time


def test_wandb_secret_reaches_the_training_process_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws, trainer, runner, report = _setup(tmp_path, monkeypatch, "wandb")
    events: list = []
    recording = RecordingRunner(runner, events.append)
    trainer.runner = recording
    ctx = _Ctx(tmp_path / "log" / "s1", session_id="s1", loop=0)
    result = trainer.train(CodeResult(workspace=str(ws)), report, ctx)  # type: ignore[arg-type]
    env = _lf(runner)["env"]
    assert env["WANDB_API_KEY"] == SECRET and env["WANDB_MODE"] == "offline" and env["WANDB_RUN_ID"] == "s1-loop0"
    assert "MLFLOW_TRACKING_URI" not in env
    assert _lf(runner)["config"]["report_to"] == "wandb"
    # never in what is persisted: the run config file, the result (snapshot), the run events
    run_config = ws.parent / "train" / ws.name / "inputs" / "train.yaml"  # the training's own folder (issue 39)
    persisted = run_config.read_text() + result.model_dump_json() + "".join(
        e.model_dump_json() for e in events)
    assert SECRET not in persisted
    # the runners never pass tracker variables on their own: data scripts do not see the key
    assert not any(k.startswith(("WANDB", "MLFLOW")) for k in passthrough_env())
    trainer.log_scores(result, EvalResult(split="validation", benchmark="demo", core_metric="accuracy", score=1.0),
                       ctx)  # type: ignore[arg-type]
    assert runner.calls[-1]["env"]["WANDB_RUN_ID"] == "s1-loop0"  # reopens the same run
    assert SECRET not in "".join(e.model_dump_json() for e in events)


def test_mlflow_gets_its_uri_and_none_tracks_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws, trainer, runner, report = _setup(tmp_path, monkeypatch, "mlflow")
    trainer.train(CodeResult(workspace=str(ws)), report, None)
    assert _lf(runner)["env"]["MLFLOW_TRACKING_URI"] == (tmp_path / "mlruns").as_uri()  # the user's, absolute
    assert _lf(runner)["config"]["run_name"] == "loop_2"  # no session context: the workspace's name
    ws2, trainer2, runner2, report2 = _setup(tmp_path / "b", monkeypatch, "none")
    result = trainer2.train(CodeResult(workspace=str(ws2)), report2, None)
    assert "run_name" not in _lf(runner2)["config"] and _lf(runner2)["config"]["report_to"] == "none"
    assert trainer2.log_scores(result, EvalResult(split="validation", benchmark="d", core_metric="a", score=1.0),
                               None) is None
    assert len(runner2.calls) == 1


def test_bad_report_to_is_a_settings_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FT_REPORT_TO", "comet")
    with pytest.raises(UserInputError, match="FT_REPORT_TO=comet"):
        load_settings()


def test_run_names_are_safe_for_every_tracker() -> None:
    assert tracking.run_name_of("2026-12-03_17:48 x/y", 3) == "2026-12-03_17-48-x-y-loop3"



class _TrackingTrainer:
    """The workflow's fake trainer plus ``log_scores`` (what the real trainer adds)."""

    def __init__(self, fail: bool = False) -> None:
        self.logged: list = []
        self.fail = fail

    def train(self, code, report, ctx):
        from tests.unit.test_finetune_workflow import FakeTrainer

        return FakeTrainer().train(code, report, ctx)

    def log_scores(self, model, validation, ctx, baseline=None):
        if self.fail:
            raise OSError("tracker down")
        self.logged.append((validation.split, validation.score, baseline))
        return RunResult(exit_code=0, duration_s=0.1)


@pytest.mark.parametrize("fail", [False, True])
def test_the_workflow_logs_the_validation_score_only_and_a_tracker_failure_is_a_warning(tmp_path: Path,
                                                                                       fail: bool) -> None:
    from ftagent.engine.events import read_events
    from ftagent.engine.loop import LoopEngine
    from ftagent.engine.session import Session
    from ftagent.finetune.components import Components
    from ftagent.finetune.state import FinetuneSessionState
    from ftagent.finetune.workflow import FinetuneWorkflow
    from ftagent.planners.heuristic.planner import HeuristicCoder, HeuristicProposer
    from tests.unit.test_finetune_workflow import (
        FakeData,
        FakeEvaluator,
        FakeValidator,
        RecordingFeedback,
        _scenario,
    )

    scenario = _scenario(tmp_path)
    trainer = _TrackingTrainer(fail=fail)
    components = Components(proposer=HeuristicProposer(scenario), coder=HeuristicCoder(scenario),
                            validator=FakeValidator(), trainer=trainer, evaluator=FakeEvaluator(),
                            feedback=RecordingFeedback(), data=FakeData())
    workflow = FinetuneWorkflow(scenario, components, coder_max_loop=3, sota_min_delta=0.0,
                                workspace_root=tmp_path / "ws")
    session = Session.create(tmp_path / "log", state_cls=FinetuneSessionState, scenario=scenario)
    session.state.trace.baseline_val = 5.0
    LoopEngine(workflow, session, loop_n=1).run()
    events = list(read_events(session.dir / "events.jsonl"))
    assert session.state.trace.get(0).val_score == 50.0 and session.state.trace.get(0).failure is None
    warnings = [e.text for e in events if e.type == "message" and "tracker" in e.text]
    if fail:
        assert trainer.logged == [] and warnings == ["tracker: validation score not logged: tracker down"]
    else:
        assert trainer.logged == [("validation", 50.0, 5.0)] and warnings == []  # never the test split's 40.0


class _ToolPython(_Recorder):
    """Runs the tracker check for real, with this interpreter as the tool env's python (no mlflow, no wandb)."""

    def run(self, cmd, *, tool, workdir, env=None, mounts=None, gpus=None, timeout=None, log_file=None, stop=None):
        if cmd[0] != "python":
            return super().run(cmd, tool=tool, workdir=workdir, env=env, mounts=mounts, timeout=timeout,
                               log_file=log_file)
        import os
        import subprocess
        import sys

        self.calls.append({"cmd": cmd, "env": dict(env or {}), "mounts": mounts or []})
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        with open(log_file, "w") as out:
            code = subprocess.run([sys.executable, *cmd[1:]], cwd=workdir, env={**os.environ, **(env or {})},
                                  stdout=out, stderr=subprocess.STDOUT, timeout=120).returncode
        return RunResult(exit_code=code, duration_s=0.1, log_file=str(log_file))


@pytest.mark.parametrize("tracker", ["mlflow", "wandb"])
def test_a_tracker_that_cannot_start_is_a_config_error_before_training(tracker: str, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 32 item 3: the library missing was [train/UNKNOWN] AttributeError '_auto_end_run' from
    transformers' MLflowCallback; now one CONFIG error naming the cause, and no training starts."""
    import importlib.util

    from ftagent.core.errors import ErrorType, StepError

    for mod in ("mlflow", "wandb"):
        if importlib.util.find_spec(mod) is not None:
            pytest.skip(f"{mod} is importable here: this test needs an interpreter without it")
    ws, trainer, _, report = _setup(tmp_path, monkeypatch, tracker)
    runner = trainer.runner = _ToolPython()
    with pytest.raises(StepError) as err:
        trainer.train(CodeResult(workspace=str(ws)), report, _Ctx(tmp_path / "log" / "s"))  # type: ignore[arg-type]
    assert err.value.error_type == ErrorType.CONFIG
    assert f"FT_REPORT_TO={tracker} cannot start" in str(err.value)
    assert f"No module named '{tracker}'" in str(err.value)
    assert "FT_REPORT_TO=none" in (err.value.suggestion or "")
    assert not any(c["cmd"][0] == "llamafactory-cli" for c in runner.calls)  # nothing trained


def test_default_stores_are_local_and_offline_and_checked_once(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Without any MLFLOW_*/WANDB_* setting: MLflow's file store and wandb's offline files in the session."""
    for tracker in ("mlflow", "wandb"):
        ws, trainer, runner, report = _setup(tmp_path / tracker, monkeypatch, tracker)
        for name in ("WANDB_API_KEY", "WANDB_MODE", "MLFLOW_TRACKING_URI"):
            monkeypatch.delenv(name)
        session = tmp_path / tracker / "log" / "s"
        for _ in range(2):  # a second full run of the same trainer is not checked again
            trainer.train(CodeResult(workspace=str(ws)), report, _Ctx(session))  # type: ignore[arg-type]
        checks = [c for c in runner.calls if c["cmd"][2] == "check"]
        assert len(checks) == 1 and checks[0]["cmd"][3] == tracker
        env = _lf(runner)["env"]
        if tracker == "mlflow":
            assert env["MLFLOW_TRACKING_URI"] == (session / "mlruns").as_uri()
            assert env["MLFLOW_ALLOW_FILE_STORE"] == "true" and env["MLFLOW_EXPERIMENT_NAME"] == "ftagent"
        else:
            assert env["WANDB_MODE"] == "offline" and env["WANDB_DIR"] == str(session / "wandb")
        store = session / ("mlruns" if tracker == "mlflow" else "wandb")
        assert any(m.source == store and not m.read_only for m in _lf(runner)["mounts"])


# -- issue 43: a user's own file store; the tracker is checked at start-up --------------------------------------
@pytest.mark.parametrize("uri", ["file:{tmp}/my_mlruns", "{tmp}/my_mlruns", "file:./my_mlruns", "./my_mlruns"])
def test_a_users_mlflow_file_store_is_allowed_absolute_and_mounted(uri: str, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 43: ``MLFLOW_TRACKING_URI=file:…`` from the user got no ``MLFLOW_ALLOW_FILE_STORE`` (MLflow 3
    refuses a file store without it: the training failed ``[train/CONFIG]``); a relative path would have
    been read from the training's working directory (the workspace); its folder was not mounted."""
    ws, trainer, runner, report = _setup(tmp_path, monkeypatch, "mlflow")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri.format(tmp=tmp_path))
    session = tmp_path / "log" / "s"
    trainer.train(CodeResult(workspace=str(ws)), report, _Ctx(session))  # type: ignore[arg-type]
    env, store = _lf(runner)["env"], tmp_path / "my_mlruns"
    assert env["MLFLOW_TRACKING_URI"] == store.as_uri()
    assert env["MLFLOW_ALLOW_FILE_STORE"] == "true" and env["MLFLOW_EXPERIMENT_NAME"] == "ftagent"
    assert any(m.source == store and not m.read_only for m in _lf(runner)["mounts"])
    assert not (session / "mlruns").exists()  # the user's store, not ours


def test_a_mlflow_server_uri_and_a_users_own_choices_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws, trainer, runner, report = _setup(tmp_path, monkeypatch, "mlflow")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.internal:5000")
    trainer.train(CodeResult(workspace=str(ws)), report, _Ctx(tmp_path / "log" / "s"))  # type: ignore[arg-type]
    env = _lf(runner)["env"]
    assert env["MLFLOW_TRACKING_URI"] == "http://mlflow.internal:5000" and "MLFLOW_ALLOW_FILE_STORE" not in env
    assert tracking.mlflow_file_store("sqlite:///mlflow.db") is None and tracking.mlflow_file_store("") is None
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"file:{tmp_path}/m")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "false")  # the user's own word stands
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "mine")
    run = tracking.tracking_run("mlflow", ws, None)
    assert tracking.tracker_env(run)["MLFLOW_ALLOW_FILE_STORE"] == "false"
    assert tracking.tracker_env(run)["MLFLOW_EXPERIMENT_NAME"] == "mine"


def test_check_at_start_gives_the_trackers_own_words_and_writes_nothing(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The start-up check (run before anything is prepared): the library missing from the tool env (here:
    this interpreter, which has neither mlflow nor wandb) is its own ImportError line; ``none`` runs nothing."""
    import importlib.util

    monkeypatch.chdir(tmp_path)
    for name in [k for k in __import__("os").environ if k.startswith(("MLFLOW_", "WANDB_"))]:
        monkeypatch.delenv(name)
    runner = _ToolPython()
    assert tracking.check_at_start("none", runner) is None and runner.calls == []
    for tracker in ("mlflow", "wandb"):
        if importlib.util.find_spec(tracker) is not None:
            continue
        words = tracking.check_at_start(tracker, runner)
        assert words == f"ModuleNotFoundError: No module named '{tracker}'", words
    assert list(tmp_path.iterdir()) == []  # the default store was checked in a scratch folder, now gone


def test_exception_words_keep_the_message_lines() -> None:
    log = ("Traceback (most recent call last):\n  File \"x.py\", line 3, in <module>\n"
           "pydantic_core._pydantic_core.ValidationError: 1 validation error for Settings\nmode\n"
           "  Input should be 'online', 'offline' [type=literal_error, input_value='bogus', input_type=str]\n")
    assert tracking.exception_words(log) == ("pydantic_core._pydantic_core.ValidationError: 1 validation error for "
                                             "Settings mode Input should be 'online', 'offline' [type=literal_error, "
                                             "input_value='bogus', input_type=str]")
