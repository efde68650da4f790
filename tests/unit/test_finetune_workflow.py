"""The fine-tuning workflow over its typed loop state, and the session start (finetune/app.py).

Each test here pins a bug of the dict-passing workflow (issue #12 / #17): a decision lost between
steps, two sources for one fact, a test-split failure that reached the agent, a fork that wrote into
the original session, bad input that left a session behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftagent.core.errors import EnvironmentFailure, ErrorType, StepFailure, UserInputError
from ftagent.core.settings import load_settings
from ftagent.core.trace import Trace
from ftagent.core.types import (
    CodeResult,
    EvalResult,
    Hypothesis,
    ScenarioInfo,
    SplitResults,
    TrainResult,
    ValidationReport,
)
from ftagent.engine.events import read_events
from ftagent.engine.loop import LoopEngine
from ftagent.engine.session import Session, list_snapshots
from ftagent.finetune.components import Components
from ftagent.finetune.loop_folders import fork_workspace
from ftagent.finetune.loop_record import experiment_of
from ftagent.finetune.scenario import FinetuneScenario
from ftagent.finetune.state import FinetuneLoop, FinetuneSessionState
from ftagent.finetune.workflow import FinetuneWorkflow
from ftagent.planners.heuristic.planner import HeuristicCoder, HeuristicProposer
from ftagent.planners.heuristic.policy import base_recipe
from tests.helpers.resolved_run import resolved_run

REPO = Path(__file__).resolve().parents[2]


def _scenario(tmp_path: Path, **kw) -> ScenarioInfo:
    return ScenarioInfo(benchmark="demo_add", base_model="builtin/tiny-qwen2", base_model_path="/m",
                        file_path=str(tmp_path / "ft"), workspace_root=str(tmp_path / "ws"),
                        datasets=["demo_add"], core_metric="accuracy", **kw)


# -- fakes: the six components, scripted -------------------------------------------------------------
class FakeData:
    def prepare(self, code, hypothesis, trace, ctx, *, debug):
        return 10 if debug else 1234

    def scan_config(self, config_path):  # no benchmark items here: nothing to hold
        return None


class FakeValidator:
    def __init__(self, fail_first: bool = False) -> None:
        self.fail_first, self.calls = fail_first, 0

    def validate(self, code, ctx):
        self.calls += 1
        if self.fail_first and self.calls == 1:
            return ValidationReport(passed=False, failure=StepFailure(stage="validate", error_type=ErrorType.OOM,
                                                                      message="CUDA out of memory"))
        return ValidationReport(passed=True, dropped_keys=["bogus"], injected_keys=["output_dir"])


class FakeTrainer:
    def train(self, code, report, ctx):
        return TrainResult(output_dir=code.workspace + "/out", model_path=code.workspace + "/out",
                           config={"learning_rate": code.plan.get("recipe", {}).get("learning_rate")},
                           loss_history=[{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.0}])


class FakeEvaluator:
    def __init__(self, test_fails: bool = False) -> None:
        self.test_fails = test_fails

    def evaluate_splits(self, model, ctx, splits=("validation", "test"), *, on_progress=None):
        out = SplitResults()
        for split in splits:
            if split == "test" and self.test_fails:
                out.failures[split] = StepFailure(stage="evaluate", error_type=ErrorType.EVAL,
                                                  message="OpenCompass wrote no results for test-secret-item",
                                                  log_tail="test-secret-item")
                continue
            out.results[split] = EvalResult(benchmark="demo_add", split=split, core_metric="accuracy",
                                            score=50.0 if split == "validation" else 40.0,
                                            error_samples=[{"q": f"{split}-sample"}])
        return out


class RecordingFeedback:
    def __init__(self) -> None:
        self.seen = []

    def feedback(self, experiment, trace, ctx):
        from ftagent.core.types import FeedbackResult

        self.seen.append(experiment.model_copy(deep=True))
        return FeedbackResult(decision=True, reason="ok", next_step="more")


def _run(tmp_path: Path, *, validator=None, evaluator=None, loops: int = 1):
    scenario = _scenario(tmp_path)
    feedback = RecordingFeedback()
    components = Components(proposer=HeuristicProposer(scenario), coder=HeuristicCoder(scenario),
                            validator=validator or FakeValidator(), trainer=FakeTrainer(),
                            evaluator=evaluator or FakeEvaluator(), feedback=feedback, data=FakeData())
    workflow = FinetuneWorkflow(scenario, components, coder_max_loop=3, sota_min_delta=0.0,
                                workspace_root=tmp_path / "ws")
    session = Session.create(tmp_path / "log", state_cls=FinetuneSessionState, scenario=scenario)
    session.state.trace.baseline_val = 0.0
    LoopEngine(workflow, session, loop_n=loops).run()
    return session, feedback


def test_the_recipe_the_coder_fell_back_to_is_the_one_recorded(tmp_path):
    """Old main: the heuristic coder mutated a re-validated copy, so the trace kept the proposed recipe."""
    session, feedback = _run(tmp_path, validator=FakeValidator(fail_first=True))
    proposed = base_recipe(_scenario(tmp_path))
    exp = session.state.trace.get(0)
    assert exp.plan["recipe"]["per_device_train_batch_size"] == max(1, proposed["per_device_train_batch_size"] // 2)
    assert exp.config["learning_rate"] == exp.plan["recipe"]["learning_rate"]  # trained = recorded
    assert exp.data_rows == 1234 and exp.system_changes == ["dropped bogus", "set output_dir"]


def test_snapshots_hold_typed_fields_and_resume_reads_them(tmp_path):
    session, _ = _run(tmp_path)
    snaps = list_snapshots(session.dir)
    after_train = next(p for p in snaps if p.name.endswith("_train"))
    loaded, _ = Session.load(after_train, FinetuneSessionState)
    loop = loaded.state.current
    assert isinstance(loop, FinetuneLoop) and isinstance(loop.model, TrainResult)
    assert isinstance(loop.hypothesis, Hypothesis) and isinstance(loop.code, CodeResult)
    assert isinstance(loaded.state.scenario, ScenarioInfo) and loop.scores.validation is None


def test_a_failed_test_evaluation_never_reaches_the_agent(tmp_path):
    session, feedback = _run(tmp_path, evaluator=FakeEvaluator(test_fails=True))
    seen = feedback.seen[0]
    assert seen.failure is None and seen.val_score == 50.0  # the loop keeps its validation result
    assert "test-secret-item" not in seen.model_dump_json()
    assert session.state.trace.get(0).test_score is None
    warnings = [e for e in read_events(session.events_path) if e.type == "message" and e.level == "warning"]
    assert any("test evaluation failed (report only)" in e.text for e in warnings)  # the report/UI still know


def test_experiment_carries_validation_error_samples_only(tmp_path):
    loop = FinetuneLoop(index=0, hypothesis=Hypothesis(hypothesis="h"))
    loop.scores.validation = EvalResult(benchmark="b", split="validation", core_metric="m", score=1.0,
                                        error_samples=[{"q": "val"}])
    loop.scores.test = EvalResult(benchmark="b", split="test", core_metric="m", score=2.0,
                                  error_samples=[{"q": "test-item"}])
    exp = experiment_of(loop)
    assert exp.error_samples == [{"q": "val"}] and "test-item" not in exp.model_dump_json()


def test_planner_data_cap_comes_from_the_scenario_only(tmp_path):
    """Old main: the proposal prompt read the cap from settings, the data step from the scenario."""
    from ftagent.planners.llm.propose import build_proposal_messages
    from ftagent.planners.llm.view import planner_view

    settings = load_settings(upper_data_size_limit=2000)
    scenario = _scenario(tmp_path, upper_data_size_limit=77)
    text = "\n".join(m["content"] for m in build_proposal_messages(scenario, planner_view(Trace()), settings))
    assert "77" in text and "2000" not in text


def test_fork_gets_its_own_workspace(tmp_path):
    root = tmp_path / "ws"
    old_ws = root / "old-session" / "loop_1"
    old_ws.mkdir(parents=True)
    (old_ws / "train.yaml").write_text("learning_rate: 1\n")
    state = FinetuneSessionState(session_id="new-session")
    state.current = FinetuneLoop(index=1, code=CodeResult(workspace=str(old_ws),
                                                          files={"train.yaml": str(old_ws / "train.yaml")}))
    fork_workspace(state, root, "old-session")
    new_ws = root / "new-session" / "loop_1"
    assert state.current.code.workspace == str(new_ws) and (new_ws / "train.yaml").is_file()
    assert state.current.code.files["train.yaml"] == str(new_ws / "train.yaml")


def test_baseline_runs_inside_the_budget_and_fails_clearly(tmp_path, monkeypatch):
    import ftagent.tools.opencompass.evaluator as ev

    seen = {}

    def fake_baseline(info, settings, runner, timeout=None, **_):
        seen["timeout"] = timeout
        return {s: EvalResult(benchmark="demo_add", split=s, core_metric="accuracy", score=1.0)
                for s in ("validation", "test")}

    monkeypatch.setattr(ev, "evaluate_baseline", fake_baseline)
    builder = FinetuneScenario(load_settings(benchmark_timeout=3600), None, lambda e: None, run=resolved_run())
    info, trace = _scenario(tmp_path), Trace()
    builder.baseline(info, trace, lambda seconds: min(seconds, 42.0))
    assert seen["timeout"] == 42.0 and trace.baseline_val == 1.0 and info.baseline.split == "validation"

    def broken(info, settings, runner, timeout=None, **_):
        raise ev.BaselineEvaluationError("the baseline evaluation of builtin/tiny-qwen2 on demo_add failed",
                                         StepFailure(stage="baseline", message="OpenCompass crashed"))

    monkeypatch.setattr(ev, "evaluate_baseline", broken)
    with pytest.raises(EnvironmentFailure, match="baseline evaluation of builtin/tiny-qwen2 on demo_add failed"):
        builder.baseline(info, Trace(), lambda s: s)


def test_plugin_runner_is_reachable_through_ft_env_type(monkeypatch):
    from ftagent.runners.factory import get_runner

    monkeypatch.setenv("FT_ENV_TYPE", "tests.unit.test_finetune_workflow:PluginRunner")
    settings = load_settings()
    assert settings.ft.env_type == "tests.unit.test_finetune_workflow:PluginRunner"
    assert isinstance(get_runner(settings), PluginRunner)
    monkeypatch.setenv("FT_ENV_TYPE", "not a runner")  # only the registry knows the names (runners/factory.py)
    with pytest.raises(UserInputError, match="unknown FT_ENV_TYPE runner 'not a runner'"):
        get_runner(load_settings())


class PluginRunner:
    name = "plugin"

    def run(self, cmd, **kw):  # pragma: no cover - only constructed
        raise NotImplementedError


@pytest.mark.parametrize("args,fragment", [
    (["--dataset", "nosuch"], "nosuch"),
    (["--base-model", "/no/such/model/folder"], "/no/such/model/folder"),
])
def test_bad_input_leaves_no_session_behind(tmp_path, args, fragment):
    """Old main: --dataset nosuch created log/<id>/events.jsonl before exiting 2."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FT_", "CHAT_", "OPENAI_"))}
    env.update({"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "FT_FILE_PATH": str(tmp_path / "ft"),
                "LOG_PATH": str(tmp_path / "log")})
    base = ["llm_finetune", "--benchmark", "demo_add", "--base-model", "builtin/tiny-qwen2"]
    if args[0] == "--base-model":
        base = base[:3] + base[5:]
    result = subprocess.run([sys.executable, "-m", "ftagent", *base, *args], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert fragment in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "log").exists()


def test_the_live_display_sees_every_event_once_before_and_after_the_session_exists(tmp_path):
    """Scenario stages run before the session exists; the build and the baseline after it."""
    from ftagent.engine.events import Message, ScenarioStage
    from ftagent.finetune.emitter import SessionEmitter

    seen = []
    emit = SessionEmitter(observer=seen.append)
    emit(ScenarioStage(stage="datasets", status="done"))  # before: kept, and shown at once
    session = Session.create(tmp_path / "log", state_cls=FinetuneSessionState)
    emit.attach(session)
    emit(ScenarioStage(stage="baseline", status="start"))  # after: through the session's log
    session.events.emit(Message(text="from the engine"))
    assert [getattr(e, "stage", None) or e.text for e in seen] == ["datasets", "baseline", "from the engine"]
    assert len(list(read_events(session.events_path))) == 3
