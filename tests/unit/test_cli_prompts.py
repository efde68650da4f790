"""`ftagent prompts --path SESSION`: the session's own scenario and trace, redacted; bad options exit 2."""

from __future__ import annotations

from typer.testing import CliRunner

from ftagent.cli.main import app
from ftagent.engine.session import Session
from ftagent.finetune.state import FinetuneLoop, FinetuneSessionState
from tests.unit import test_prompts as tp

SECRET = "sk-cli-prompts-SECRET-987654"


def _session(tmp_path, monkeypatch):
    monkeypatch.setattr(tp.brief_machine, "cpu_facts", lambda: (2, 24.0))
    scenario = tp._demo_scenario(tmp_path / "files")
    trace = tp._trace(tmp_path / "files", 62.0, "accuracy")
    session = Session.create(tmp_path / "log", config={"run": {"benchmark": "demo_add",
                                                               "base_model": "builtin/tiny-qwen2", "loop_n": 3}},
                             state_cls=FinetuneSessionState, scenario=scenario, trace=trace)
    session.state.current = FinetuneLoop(index=2, hypothesis=tp.Hypothesis(hypothesis=f"try {SECRET}", parent=0))
    session.save(2, 1, "propose")
    return session.dir


def test_prompts_of_a_session(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    session = _session(tmp_path, monkeypatch)
    result = CliRunner().invoke(app, ["prompts", "--path", str(session), "--step", "config"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert out.startswith("===== config:") and "- learning_rate (" in out and "- lora_rank (" in out
    assert "- finetuning_type (" in out and "62.0 % accuracy" in out
    assert SECRET not in out and "***REDACTED***" in out  # the hypothesis held the key: redacted like logs
    assert str(tp.TEST_SCORE) not in out
    everything = CliRunner().invoke(app, ["prompts", "--path", str(session)]).output
    assert [line.split(":")[0] for line in everything.splitlines() if line.startswith("=====")] == [
        "===== propose", "===== data", "===== config", "===== feedback"]


def test_bad_options_exit_2(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    assert runner.invoke(app, ["prompts", "--step", "nope", "--benchmark", "demo_add"]).exit_code == 2
    assert runner.invoke(app, ["prompts", "--path", str(tmp_path / "missing")]).exit_code == 2
    assert runner.invoke(app, ["prompts"]).exit_code == 2  # neither --benchmark/--base-model nor --path
