"""LLMProposer, LLMCoder and LLMFeedback against the fake OpenAI server with scripted data files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from ftagent.core.errors import ErrorType, StepFailure  # noqa: E402
from ftagent.core.settings import FTSettings, LLMSettings, PathSettings, Settings  # noqa: E402
from ftagent.core.trace import Experiment, Trace  # noqa: E402
from ftagent.core.types import EvalResult, Hypothesis, ModelInfo, ScenarioInfo  # noqa: E402
from ftagent.engine.event_log import EventLog  # noqa: E402
from ftagent.engine.events import read_events  # noqa: E402
from ftagent.engine.loop import StepContext  # noqa: E402
from ftagent.engine.session import Session  # noqa: E402
from ftagent.finetune.protocols import Coder, Feedback, Proposer  # noqa: E402
from ftagent.llm.client import LLMClient  # noqa: E402
from ftagent.planners.llm.code import LLMCoder  # noqa: E402
from ftagent.planners.llm.feedback import LLMFeedback, decide_numeric  # noqa: E402
from ftagent.planners.llm.propose import LLMProposer  # noqa: E402
from tests.fakes.openai_server import FakeOpenAIServer, Reply  # noqa: E402
from tests.unit._workflows import RecordedLoop, TraceState  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llm"
TEST_SCORE = 0.713579  # planted: must never reach the server
BASELINE_TEST = 0.642531


@pytest.fixture()
def server():
    with FakeOpenAIServer() as srv:
        yield srv


@pytest.fixture()
def settings(server) -> Settings:
    llm = LLMSettings(chat_model="fake-model", openai_api_key="sk-agent-test-key-000000", chat_stream=False,
                      openai_api_base=server.base_url, max_retry=1, retry_wait_seconds=0.01, chat_model_map={})
    return Settings(FTSettings(sota_min_delta=0.01), llm, PathSettings())


@pytest.fixture()
def ctx(tmp_path) -> StepContext:
    session = Session.create(tmp_path / "log", state_cls=TraceState)
    session.state.current = RecordedLoop(index=3)
    return StepContext(session, EventLog(session.events_path), None, time.time)


@pytest.fixture()
def scenario(tmp_path) -> ScenarioInfo:
    return ScenarioInfo(benchmark="demo", benchmark_description="add two numbers", base_model="builtin/tiny",
                        base_model_path="/models/tiny", file_path=str(tmp_path), workspace_root=str(tmp_path / "ws"),
                        model_info=ModelInfo(name="builtin/tiny", path="/models/tiny", template="qwen",
                                             max_position_embeddings=1024),
                        memory_report="lora: 1.2 GiB; full: 3.4 GiB",
                        baseline=EvalResult(benchmark="demo", split="validation", core_metric="accuracy", score=0.2))


def _trace(tmp_path: Path) -> Trace:
    parent_ws = tmp_path / "loop_0"
    parent_ws.mkdir()
    (parent_ws / "process_data.py").write_text("print('parent script')\n")
    (parent_ws / "train.yaml").write_text("learning_rate: 1.0e-4\n")
    trace = Trace(core_metric="accuracy", baseline_val=0.2, baseline_test=BASELINE_TEST)
    trace.record(Experiment(loop=0, hypothesis=Hypothesis(hypothesis="parent idea"), val_score=0.5, test_score=TEST_SCORE,
                            decision=True, artefacts={"process_data.py": str(parent_ws / "process_data.py"),
                                                      "train.yaml": str(parent_ws / "train.yaml")}))
    trace.record(Experiment(loop=1, parent=0, hypothesis={"hypothesis": "sibling idea"}, val_score=0.45,
                            test_score=TEST_SCORE, reason="worse than loop 0"))
    return trace


def _code_reply(name: str, fence: str) -> Reply:
    return Reply.from_file(FIXTURES / name, fence=fence, preface="Here is the file.\n")


def test_components_satisfy_protocols(scenario, settings):
    assert isinstance(LLMProposer(scenario, settings), Proposer)
    assert isinstance(LLMCoder(scenario, settings), Coder)
    assert isinstance(LLMFeedback(scenario, settings), Feedback)


def test_proposal_becomes_hypothesis(server, scenario, settings, ctx, tmp_path):
    server.queue(Reply.from_file(FIXTURES / "hypothesis.json"))
    hyp = LLMProposer(scenario, settings).propose(_trace(tmp_path), ctx)
    expected = json.loads((FIXTURES / "hypothesis.json").read_text())
    assert hyp.hypothesis == expected["hypothesis"] and hyp.task == expected["task"]
    assert hyp.parent == 0 and hyp.skip_data_processing is True and hyp.planner == "llm"
    body = server.chat_requests[0].raw
    assert "parent idea" in body and "sibling idea" in body and "print('parent script')" in body
    assert str(TEST_SCORE) not in server.all_request_text()
    assert str(BASELINE_TEST) not in server.all_request_text()
    # the call is recorded in the session and announced as an event
    assert (ctx.session.dir / "llm" / "1.json").exists()
    events = list(read_events(ctx.session.events_path))
    assert events[0].type == "llm_call" and events[0].loop == 3 and events[0].stage == "proposal"


def test_skip_without_parent_is_ignored(server, scenario, settings, ctx):
    server.queue(Reply.from_file(FIXTURES / "hypothesis.json"))
    hyp = LLMProposer(scenario, settings).propose(Trace(baseline_val=0.2), ctx)
    assert hyp.parent is None and hyp.skip_data_processing is False


def test_coder_writes_both_files(server, scenario, settings, ctx, tmp_path):
    server.queue(_code_reply("process_data.py", "python"), _code_reply("train.yaml", "yaml"))
    ws = tmp_path / "loop_3"
    hyp = Hypothesis(hypothesis="h", task="t", parent=0)
    result = LLMCoder(scenario, settings).code(hyp, _trace(tmp_path), ws, None, ctx)
    assert (ws / "process_data.py").read_text() == (FIXTURES / "process_data.py").read_text()
    assert yaml.safe_load((ws / "train.yaml").read_text())["template"] == "qwen"
    assert set(result.files) == {"process_data.py", "train.yaml"} and result.round == 1
    data_req, config_req = (r.body["messages"][-1]["content"] for r in server.chat_requests)
    assert "FT_DATASETS_DIR" in data_req and "--debug" in data_req and "print('parent script')" in data_req
    assert "template: qwen" in config_req and "lora: 1.2 GiB" in config_req and "/models/tiny" not in config_req
    assert str(TEST_SCORE) not in server.all_request_text()


def test_coder_reuses_parent_script_when_skipping(server, scenario, settings, ctx, tmp_path):
    server.queue(_code_reply("train.yaml", "yaml"))
    ws = tmp_path / "loop_3"
    hyp = Hypothesis(hypothesis="h", task="t", parent=0, skip_data_processing=True)
    result = LLMCoder(scenario, settings).code(hyp, _trace(tmp_path), ws, None, ctx)
    assert (ws / "process_data.py").read_text() == "print('parent script')\n"
    assert len(server.chat_requests) == 1 and "reused from loop 0" in result.notes


def test_coder_round_with_config_feedback_fixes_the_config(server, scenario, settings, ctx, tmp_path):
    ws = tmp_path / "loop_3"
    ws.mkdir()
    (ws / "process_data.py").write_text("print('kept')\n")
    (ws / "train.yaml").write_text("cutoff_len: 99999\n")
    failure = StepFailure(stage="validate", error_type=ErrorType.CONFIG,
                          message="cutoff_len 99999 exceeds max_position_embeddings 1024",
                          log_tail="ValueError: distinctive-log-line-42", suggestion="lower cutoff_len")
    server.queue(_code_reply("train.yaml", "yaml"))
    ctx.loop.gotos["code"] = 1
    result = LLMCoder(scenario, settings).code(Hypothesis(hypothesis="h"), Trace(), ws, failure, ctx)
    assert len(server.chat_requests) == 1 and result.round == 2
    sent = server.chat_requests[0].body["messages"][-1]["content"]
    assert "cutoff_len 99999 exceeds" in sent and "distinctive-log-line-42" in sent and "cutoff_len: 99999" in sent
    assert (ws / "process_data.py").read_text() == "print('kept')\n"
    assert "cutoff_len: 512" in (ws / "train.yaml").read_text()


def test_coder_round_with_data_feedback_rewrites_the_script(server, scenario, settings, ctx, tmp_path):
    ws = tmp_path / "loop_3"
    ws.mkdir()
    (ws / "process_data.py").write_text("raise SystemExit(3)\n")
    (ws / "train.yaml").write_text("learning_rate: 1.0e-4\n")
    failure = StepFailure(stage="debug_data_processing", error_type=ErrorType.DATA,
                          message="process_data.py --debug exited with 3")
    server.queue(_code_reply("process_data.py", "python"))
    LLMCoder(scenario, settings).code(Hypothesis(hypothesis="h"), Trace(), ws, failure, ctx)
    sent = server.chat_requests[0].body["messages"][-1]["content"]
    assert "exited with 3" in sent and "raise SystemExit(3)" in sent
    assert len(server.chat_requests) == 1 and (ws / "train.yaml").read_text() == "learning_rate: 1.0e-4\n"


def test_scripted_data_script_really_runs(tmp_path):
    data_dir = tmp_path / "datasets" / "math"
    data_dir.mkdir(parents=True)
    rows = [{"question": f"{i}+1?", "answer": str(i + 1)} for i in range(150)] + [{"question": "", "answer": "x"}]
    (data_dir / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    env = dict(os.environ, FT_DATASETS_DIR=str(tmp_path / "datasets"))
    out = subprocess.run([sys.executable, str(FIXTURES / "process_data.py"), "--debug"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=60, check=True)
    data = json.loads((tmp_path / "data.json").read_text())
    assert len(data) == 100 and all(d["instruction"] and d["output"] for d in data)
    assert "kept 100 of 151" in out.stdout


def _experiment(val: float | None, failure: StepFailure | None = None, **kw) -> Experiment:
    return Experiment(loop=2, parent=0, hypothesis=Hypothesis(hypothesis="try more epochs", task="t"), val_score=val,
                      test_score=TEST_SCORE, failure=failure, **kw)


def test_decide_numeric():
    trace = Trace(baseline_val=0.5)
    assert decide_numeric(_experiment(0.52), trace, 0.01)[0] is True
    assert decide_numeric(_experiment(0.505), trace, 0.01)[0] is False  # within the margin
    assert decide_numeric(_experiment(None), trace, 0.0)[0] is False
    failed = _experiment(0.9, StepFailure(stage="evaluate", message="x"))
    assert decide_numeric(failed, trace, 0.0) == (False, "Loop failed at evaluate (UNKNOWN).")
    assert decide_numeric(_experiment(0.4), Trace(baseline_val=0.5, direction="min"), 0.0)[0] is True


def test_feedback_numbers_overrule_llm_yes(server, scenario, settings, ctx, tmp_path):
    server.queue(Reply.from_file(FIXTURES / "feedback.json"))  # the LLM says "yes"
    # the experiment carries validation error samples only: test items have no field to travel in
    experiment = _experiment(0.46, loss_history=[{"step": i, "loss": 2.0 - i / 100} for i in range(80)],
                             error_samples=[{"q": "1+1", "pred": "3"}])
    result = LLMFeedback(scenario, settings).feedback(experiment, _trace(tmp_path), ctx)
    assert result.decision is False  # 0.46 does not beat the SOTA's 0.5
    assert "loss fell steadily" in result.reason and result.next_step == "Add harder multi-step problems."
    sent = server.chat_requests[0].body["messages"][-1]["content"]
    assert "not better" in sent and "'pred'" not in sent and '"pred": "3"' in sent
    # the loss curve as a summary and a compact sampled table, not one JSON object per point
    assert "80 points, first 2, last 1.21 (step 79), min 1.21 at step 79; falling" in sent
    assert "| 0 | 2 |" in sent and "| 79 | 1.21 |" in sent and '"step"' not in sent
    assert sent.count("\n| ") <= 13
    everything = server.all_request_text()
    assert str(TEST_SCORE) not in everything and str(BASELINE_TEST) not in everything
    assert "secret-test-item" not in everything


def test_feedback_numbers_overrule_llm_no(server, scenario, settings, ctx, tmp_path):
    server.queue('{"decision": "no", "reason": "looks weak", "next_step": "n"}')
    result = LLMFeedback(scenario, settings).feedback(_experiment(0.6), _trace(tmp_path), ctx)
    assert result.decision is True and "beats loop 0" in result.reason


def test_error_feedback(server, scenario, settings, ctx, tmp_path):
    server.queue(Reply.from_file(FIXTURES / "feedback_error.json"))
    failure = StepFailure(stage="train", error_type=ErrorType.UNKNOWN, message="killed", log_tail="RuntimeError: "
                          "out of memory distinctive-tail")
    result = LLMFeedback(scenario, settings).feedback(_experiment(None, failure), _trace(tmp_path), ctx)
    assert result.decision is False and result.error_type == "OOM"
    assert "Halve the batch size" in result.next_step
    assert "distinctive-tail" in server.chat_requests[0].raw


def test_feedback_survives_a_broken_llm(server, scenario, settings, ctx, tmp_path):
    server.fail_next(500, 500)
    client = LLMClient(settings.llm, settings.ft, ctx.session.dir, ctx.emit)
    result = LLMFeedback(scenario, settings, client).feedback(_experiment(0.9), _trace(tmp_path), ctx)
    assert result.decision is True and "No LLM explanation" in result.reason
    assert len(server.chat_requests) == 2  # MAX_RETRY=1
