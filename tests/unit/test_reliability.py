"""The fault table of docs/reliability.md: the rows no other test file covers.

* SIGKILL of ftagent in each of the six steps, then a ``--path`` resume (the real FinetuneWorkflow over
  its typed loop state, with scripted components, in a child process that is killed mid-step);
* disk full while a snapshot is written;
* an LLM that refuses (prose instead of JSON / code);
* the data script: crash, timeout, exit 0 without data.json, non-JSON output;
* a NaN loss in the micro-batch run.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from ftagent.benchmarks import get_benchmark
from ftagent.core.errors import ErrorType, StepError
from ftagent.core.types import (
    CodeResult,
    EvalResult,
    FeedbackResult,
    ScenarioInfo,
    SplitResults,
    TrainResult,
    ValidationReport,
)
from ftagent.engine.events import read_events
from ftagent.engine.loop import LoopEngine
from ftagent.engine.session import Session, list_snapshots
from ftagent.finetune.components import Components
from ftagent.finetune.state import FinetuneSessionState
from ftagent.finetune.workflow import FinetuneWorkflow
from ftagent.planners.heuristic.planner import HeuristicCoder, HeuristicProposer
from ftagent.runners.base import RunResult
from tests.helpers.weights import safetensors_bytes

REPO = Path(__file__).resolve().parents[2]
STEPS = ["propose", "code", "validate", "train", "evaluate", "feedback"]


# -- scripted components; the one named by FT_TEST_BLOCK blocks in loop 1 (so it can be killed there) --
def _block(step: str, loop: int) -> None:
    if os.environ.get("FT_TEST_BLOCK") == step and loop == 1:
        Path(os.environ["FT_TEST_MARKER"]).write_text(step)
        time.sleep(120)


def _loop_of(ctx) -> int:
    return ctx.loop.index


class Proposer(HeuristicProposer):
    def propose(self, trace, ctx):
        _block("propose", _loop_of(ctx))
        return super().propose(trace, ctx)


class Coder(HeuristicCoder):
    def code(self, hypothesis, trace, workspace, feedback, ctx):
        _block("code", _loop_of(ctx))
        return super().code(hypothesis, trace, workspace, feedback, ctx)


class Data:
    def prepare(self, code, hypothesis, trace, ctx, *, debug):
        return 10 if debug else 100

    def scan_config(self, config_path):
        return None


class Validator:
    def validate(self, code, ctx):
        _block("validate", _loop_of(ctx))
        return ValidationReport(passed=True)


class Trainer:
    def train(self, code, report, ctx):
        _block("train", _loop_of(ctx))
        return TrainResult(output_dir=code.workspace + "/out", model_path=code.workspace + "/out",
                           loss_history=[{"step": 1, "loss": 1.0}])


class Evaluator:
    def evaluate_splits(self, model, ctx, splits=("validation", "test"), *, on_progress=None):
        _block("evaluate", _loop_of(ctx))
        return SplitResults(results={split: EvalResult(
            benchmark="demo_add", split=split, core_metric="accuracy",
            score=10.0 + _loop_of(ctx) if split == "validation" else 5.0) for split in splits})


class Feedback:
    def __init__(self) -> None:
        self.calls = 0

    def feedback(self, experiment, trace, ctx):
        _block("feedback", _loop_of(ctx))
        self.calls += 1
        return FeedbackResult(decision=True, reason="scripted", next_step="more")


def scenario(root: Path) -> ScenarioInfo:
    return ScenarioInfo(benchmark="demo_add", base_model="builtin/tiny-qwen2", base_model_path="/m",
                        file_path=str(root / "ft"), workspace_root=str(root / "ws"), datasets=["demo_add"],
                        core_metric="accuracy")


def workflow(root: Path, feedback: Feedback | None = None) -> FinetuneWorkflow:
    scen = scenario(root)
    components = Components(proposer=Proposer(scen), coder=Coder(scen), validator=Validator(), trainer=Trainer(),
                            evaluator=Evaluator(), feedback=feedback or Feedback(), data=Data())
    return FinetuneWorkflow(scen, components, coder_max_loop=2, sota_min_delta=0.0, workspace_root=root / "ws")


CHILD = """
import sys
from pathlib import Path
from ftagent.engine.loop import LoopEngine
from ftagent.engine.session import Session
from ftagent.finetune.state import FinetuneSessionState
from tests.unit.test_reliability import scenario, workflow
root = Path(sys.argv[1])
session = Session.create(root / "log", state_cls=FinetuneSessionState, scenario=scenario(root))
session.state.trace.baseline_val = 0.0
LoopEngine(workflow(root), session, loop_n=2).run()
"""


@pytest.mark.parametrize("step", STEPS)
def test_sigkill_in_each_step_then_path_resume(tmp_path, step):
    marker = tmp_path / "blocked"
    env = {**os.environ, "PYTHONPATH": str(REPO), "FT_TEST_BLOCK": step, "FT_TEST_MARKER": str(marker)}
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)], env=env, cwd=tmp_path)
    deadline = time.time() + 60
    while not marker.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert marker.exists(), f"the child never reached loop 1 / {step} (exit {proc.poll()})"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    (session_dir,) = (tmp_path / "log").iterdir()
    # `--path <session dir>` resumes from the newest snapshot: the one taken after the step before
    resumed, path = Session.load(session_dir, FinetuneSessionState)
    before = STEPS.index(step) - 1
    assert (path.parent.name, path.name) == (("0", "5_feedback") if before < 0 else ("1", f"{before}_{STEPS[before]}"))
    resumed.checkout(path)
    feedback = Feedback()
    summary = LoopEngine(workflow(tmp_path, feedback), resumed, loop_n=2).run()
    assert summary.status == "completed" and summary.failures == []
    state = resumed.state
    assert state.loop_index == 2 and [e.loop for e in state.trace.experiments] == [0, 1]  # loop 0 kept, 1 redone
    assert state.trace.experiments[1].val_score == 11.0 and state.trace.sota_loop == 1
    assert feedback.calls == 1  # only loop 1's feedback ran again
    starts = [(e.loop, e.step) for e in read_events(resumed.events_path) if e.type == "step_start"]
    assert starts == [(li, s) for li in range(2) for s in STEPS]  # the killed step's partial events were cut
    assert [f"{p.parent.name}/{p.name}" for p in list_snapshots(session_dir)][-1] == "1/5_feedback"


# -- disk full while a snapshot is written ------------------------------------------------------------
def test_disk_full_while_writing_a_snapshot(tmp_path, monkeypatch):
    import ftagent.engine.session as session_mod

    session = Session.create(tmp_path / "log", state_cls=FinetuneSessionState, scenario=scenario(tmp_path))
    session.state.trace.baseline_val = 0.0
    LoopEngine(workflow(tmp_path), session, loop_n=1).run()
    previous = list_snapshots(session.dir)[-1]
    kept = previous.read_bytes()

    def no_space(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(session_mod, "os", SimpleNamespace(**{**vars(os), "fsync": no_space}))
    summary = LoopEngine(workflow(tmp_path), session, loop_n=2).run()
    assert summary.status == "env_error"
    assert "cannot write the session snapshot" in summary.message and "No space left on device" in summary.message
    assert f"resume with --path {previous}" in summary.message
    assert previous.read_bytes() == kept  # the previous snapshot survives, byte for byte
    assert not [p for p in session.dir.rglob("*.tmp")]  # no half-written temp file lingers
    end = [e for e in read_events(session.events_path) if e.type == "session_end"][-1]
    assert end.status == "env_error"
    monkeypatch.undo()
    resumed, path = Session.load(previous, FinetuneSessionState)
    resumed.checkout(path)
    assert LoopEngine(workflow(tmp_path), resumed, loop_n=2).run().status == "completed"


# -- an LLM that refuses -------------------------------------------------------------------------------
def test_llm_refusal_is_reasked_then_one_llm_error(tmp_path):
    from ftagent.core.settings import LLMSettings
    from ftagent.llm.client import LLMCallError, LLMClient
    from tests.fakes.openai_server import FakeOpenAIServer

    refusal = "I'm sorry, but I can't help with that request."
    with FakeOpenAIServer(default=refusal) as server:
        client = LLMClient(LLMSettings(chat_model="openai/m", openai_api_base=server.base_url, chat_stream=False,
                                       max_retry=0), session_dir=tmp_path)
        with pytest.raises(LLMCallError) as as_json:
            client.chat_json([{"role": "user", "content": "propose"}], FeedbackResult, stage="proposal")
        with pytest.raises(LLMCallError) as as_code:
            client.chat_code([{"role": "user", "content": "write it"}], "python", stage="data_coder")
        sent = len(server.chat_requests)
    assert as_json.value.error_type is ErrorType.LLM and "no valid JSON reply" in as_json.value.message
    assert "no usable python block" in as_code.value.message
    assert sent == 6  # three answers each, then it stops (the loop fails into feedback)
    assert len(list((tmp_path / "llm").glob("*.json"))) == 6


# -- the data script ------------------------------------------------------------------------------------
class ScriptRunner:
    """Stands in for the runner: plays one outcome of ``python process_data.py``."""

    name = "scripted"

    def __init__(self, outcome: str) -> None:
        self.outcome = outcome

    def run(self, cmd, *, tool, workdir, env=None, mounts=None, gpus=None, timeout=None, log_file=None):
        ws = Path(workdir)
        if self.outcome == "crash":
            text, code = "Traceback (most recent call last):\nKeyError: 'question'\n", 1
        elif self.outcome == "timeout":
            return RunResult(exit_code=None, duration_s=timeout or 1, timed_out=True, log_tail="still working")
        elif self.outcome == "no_output":
            text, code = "done\n", 0
        else:
            (ws / "data.json").write_text({"not_json": "{rows", "empty": "[]",
                                           "bad_rows": json.dumps([{"question": "q", "answer": "a"}])}[self.outcome])
            text, code = "wrote data.json\n", 0
        if log_file is not None:
            Path(log_file).write_text(text)
        return RunResult(exit_code=code, duration_s=0.1, log_tail=text, log_file=str(log_file) if log_file else None)


@pytest.mark.parametrize(("outcome", "error_type", "fragment"), [
    ("crash", ErrorType.DATA, "process_data.py failed (exit 1)"),
    ("timeout", ErrorType.TIMEOUT, "did not finish within"),
    ("no_output", ErrorType.DATA, "wrote no data.json"),
    ("not_json", ErrorType.DATA, "not readable JSON"),
])
def test_data_script_faults_become_data_errors(tmp_path, outcome, error_type, fragment):
    from ftagent.core.settings import load_settings
    from ftagent.tools.llamafactory.data_script import DataProcessor

    ws = tmp_path / "ws"
    ws.mkdir()
    scen = scenario(tmp_path)
    ctx = SimpleNamespace(limit=lambda s: s, emit=lambda e: None)
    data = DataProcessor(scen, load_settings(file_path=str(tmp_path / "ft")), ScriptRunner(outcome), input_columns=["question"], answer_column="answer")
    hypothesis = SimpleNamespace(skip_data_processing=False, parent=None)
    with pytest.raises(StepError) as info:
        data.prepare(CodeResult(workspace=str(ws)), hypothesis, None, ctx, debug=True)
    assert info.value.error_type is error_type and fragment in info.value.message
    if outcome == "crash":
        assert "KeyError: 'question'" in info.value.log_tail  # the planner sees the traceback


@pytest.mark.parametrize(("outcome", "fragment"), [("empty", "empty list"), ("bad_rows", "'instruction'")])
def test_empty_and_non_alpaca_output_fail_the_validate_step(tmp_path, outcome, fragment):
    from ftagent.core.settings import load_settings
    from ftagent.tools.llamafactory.catalogue import read_catalogue
    from ftagent.tools.llamafactory.data_script import DataProcessor
    from ftagent.tools.llamafactory.validator import LlamaFactoryValidator

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "train.yaml").write_text(yaml.safe_dump({"learning_rate": 1e-4}))
    scen = scenario(tmp_path)
    settings = load_settings(file_path=str(tmp_path / "ft"))
    ctx = SimpleNamespace(limit=lambda s: s, emit=lambda e: None)
    rows = DataProcessor(scen, settings, ScriptRunner(outcome), input_columns=["question"], answer_column="answer").prepare(
        CodeResult(workspace=str(ws)), SimpleNamespace(skip_data_processing=False, parent=None), None, ctx, debug=True)
    assert rows == 1 if outcome == "bad_rows" else rows == 0
    validator = LlamaFactoryValidator(scen, settings, runner=ScriptRunner("crash"),
                                      catalogue=read_catalogue(REPO / "tests" / "fixtures" / "llamafactory"))
    report = validator.validate(CodeResult(workspace=str(ws)), None)
    assert not report.passed and report.failure.error_type is ErrorType.DATA
    assert fragment in report.failure.message + json.dumps(report.failure.details)


# -- a NaN loss in the micro-batch run ------------------------------------------------------------------
class NaNTrainRunner:
    """``llamafactory-cli train`` that exits 0 after logging only NaN losses."""

    name = "nan"

    def run(self, cmd, *, tool, workdir, env=None, mounts=None, gpus=None, timeout=None, log_file=None):
        config = yaml.safe_load(Path(cmd[-1]).read_text())
        out = Path(config["output_dir"])
        out.mkdir(parents=True, exist_ok=True)
        (out / "trainer_log.jsonl").write_text("".join(json.dumps({"current_steps": s, "loss": float("nan")}) + "\n"
                                                       for s in (1, 2)))
        Path(log_file).write_text("{'loss': nan, 'grad_norm': nan}\n")
        return RunResult(exit_code=0, duration_s=0.1, log_tail="{'loss': nan}", log_file=str(log_file))


def test_nan_loss_in_the_micro_batch_is_a_divergence(tmp_path):
    from ftagent.core.settings import load_settings
    from ftagent.tools.llamafactory.catalogue import read_catalogue
    from ftagent.tools.llamafactory.validator import LlamaFactoryValidator

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "data.json").write_text(json.dumps([{"instruction": "What is 2 + 3?", "input": "", "output": "5"}] * 4))
    (ws / "train.yaml").write_text(yaml.safe_dump({"learning_rate": 10.0, "finetuning_type": "full"}))
    validator = LlamaFactoryValidator(scenario(tmp_path), load_settings(file_path=str(tmp_path / "ft")),
                                      runner=NaNTrainRunner(),
                                      catalogue=read_catalogue(REPO / "tests" / "fixtures" / "llamafactory"))
    report = validator.validate(CodeResult(workspace=str(ws)), None)
    assert not report.passed and report.failure.error_type is ErrorType.DIVERGED
    assert "micro-batch run diverged at step 1: loss nan" in report.failure.message
    assert "Lower learning_rate" in report.failure.suggestion



# -- OpenCompass exits 0 but wrote no results --------------------------------------------------------
class SilentOpenCompass:
    """``opencompass`` that exits 0 with a summary of dashes and no results/predictions."""

    name = "silent-oc"
    tools_env = "/fake/tools"

    def __init__(self) -> None:
        self.runs = 0

    def run(self, cmd, *, tool, workdir, env=None, mounts=None, gpus=None, timeout=None, log_file=None):
        import re

        from tests.helpers.weights import answer_weights_check

        checked = answer_weights_check(cmd, log_file)  # ftagent's weights check before any run (issue 43)
        if checked is not None:
            return checked
        self.runs += 1
        cfg = Path(cmd[1]).read_text(encoding="utf-8")
        abbrs = re.findall(r"abbr='([^']*)',\n\s*type=CustomDataset", cfg)
        run = Path(cmd[3]) / f"20260101_0000{self.runs:02d}"
        (run / "summary").mkdir(parents=True)
        (run / "summary" / "summary_20260101.csv").write_text(
            "dataset,version,metric,mode,ft-demo_add\n" + "".join(f"{a},-,-,-,-\n" for a in abbrs))
        lines = [f"- OpenCompass - INFO - Current exp folder: {run}", "- OpenCompass - INFO - write summary"]
        if log_file is not None:
            Path(log_file).write_text("\n".join(lines) + "\n")
        return RunResult(exit_code=0, duration_s=1.0, log_tail="\n".join(lines))


def test_opencompass_exit_0_without_results_is_an_eval_error(tmp_path):
    from ftagent.core.settings import load_settings
    from ftagent.tools.opencompass.runs import evaluate_splits_of_path

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(safetensors_bytes(b"weights"))
    (model / "chat_template.jinja").write_text("{{ messages }}")
    runner = SilentOpenCompass()
    settings = load_settings(file_path=tmp_path / "ft", benchmark_limit=4)
    with pytest.raises(StepError) as info:
        evaluate_splits_of_path(model, None, benchmark=get_benchmark("demo_add"), splits=("validation", "test"), settings=settings,
                                runner=runner, work_dir=tmp_path / "work", model_name="builtin/tiny-qwen2")
    assert info.value.error_type is ErrorType.EVAL and "validation" in info.value.message
    assert runner.runs == 2  # retried once, then one clear error (never a score of 0 from nothing)
    assert not list((tmp_path / "ft" / "eval_cache").glob("*.json"))  # nothing cached from a failed run


# -- the LLM planner without bubblewrap: exit 2 before any session exists ------------------------------
def test_llm_planner_without_bwrap_stops_before_a_session_exists(tmp_path, monkeypatch):
    from ftagent.core.errors import UserInputError
    from ftagent.finetune.app import FinetuneOptions, run_finetune
    from ftagent.runners import sandbox

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sandbox, "probe_bwrap", lambda executable=None: (False, "bwrap is not installed"))
    for name, value in {"LOG_PATH": tmp_path / "log", "WORKSPACE_PATH": tmp_path / "ws", "FT_FILE_PATH": tmp_path / "ft",
                        "FT_ENV_TYPE": "local", "CHAT_MODEL": "gpt-4o", "OPENAI_API_KEY": "sk-FAKE-SECRET-123456",
                        "FT_PLANNER": "auto", "FT_SANDBOX": "auto"}.items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.delenv("FT_ALLOW_UNSANDBOXED", raising=False)
    with pytest.raises(UserInputError, match="apt-get install bubblewrap"):
        run_finetune(FinetuneOptions(benchmark="demo_add", base_model="builtin/tiny-qwen2", loop_n=1))
    assert not (tmp_path / "log").exists() and not (tmp_path / "ws").exists()
