"""Issue 32: a run described by one file — `ftagent llm_finetune --config run.yaml` (flags override the file,
unknown keys exit 2 with a did-you-mean) and the same file as a task of tasks.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from ftagent.cli.main import app
from ftagent.cli.run import option_key
from ftagent.core.errors import UserInputError
from ftagent.core.run_config import RunConfig, load_run_file
from ftagent.jobs.tasks import build_plan, read_tasks_file

RUN = """\
benchmark: demo_add
base-model: builtin/tiny-qwen2
loop_n: 2
timeout: 90m
upper_data_size_limit: 300
user_target_scenario: learn to add
quiet: true
"""


@pytest.fixture
def captured(tmp_path, monkeypatch):
    """llm_finetune's options as they reach run_finetune (no session is run)."""
    import ftagent.finetune.app as finetune_app
    from ftagent.engine.loop import RunSummary

    monkeypatch.chdir(tmp_path)
    seen = []

    def fake_run(options):
        seen.append(options)
        return RunSummary(status="completed", loops_done=0, steps_run=0)

    monkeypatch.setattr(finetune_app, "run_finetune", fake_run)
    return seen


def test_every_option_of_llm_finetune_is_a_key():
    command = get_command(app).commands["llm_finetune"]
    keys = {option_key(p) for p in command.params if p.name != "config"}
    assert keys == set(RunConfig.model_fields)


def test_the_run_file_gives_every_option(tmp_path, captured):
    (tmp_path / "run.yaml").write_text(RUN)
    res = CliRunner().invoke(app, ["llm_finetune", "--config", "run.yaml"])
    assert res.exit_code == 0, res.output
    o = captured[0]
    assert (o.benchmark, o.base_model, o.loop_n, o.timeout, o.upper_data_size_limit, o.user_target_scenario,
            o.quiet) == ("demo_add", "builtin/tiny-qwen2", 2, "90m", 300, "learn to add", True)


def test_flags_override_the_file(tmp_path, captured):
    (tmp_path / "run.yaml").write_text(RUN)
    res = CliRunner().invoke(app, ["llm_finetune", "--loop-n", "5", "--config", "run.yaml", "--timeout", "1h"])
    assert res.exit_code == 0, res.output
    assert (captured[0].loop_n, captured[0].timeout, captured[0].base_model) == (5, "1h", "builtin/tiny-qwen2")


def test_relative_files_are_taken_beside_the_run_file(tmp_path, captured):
    sub = tmp_path / "exp"
    sub.mkdir()
    (sub / "data.jsonl").write_text('{"instruction": "1+1", "output": "2"}\n')
    (sub / "run.yaml").write_text("benchmark: demo_add\nbase_model: builtin/tiny-qwen2\ndataset: data.jsonl\n")
    assert CliRunner().invoke(app, ["llm_finetune", "--config", "exp/run.yaml"]).exit_code == 0
    assert captured[0].dataset == str(sub / "data.jsonl")


@pytest.mark.parametrize("text, message", [
    ("lop_n: 3\n", "unknown key 'lop_n'. Did you mean 'loop_n'?"),
    ("base_modle: x\n", "Did you mean 'base_model'?"),
    ("loop_n: 0\n", "loop_n=0: Input should be greater than or equal to 1"),
    ("- a list\n", "expected a mapping"),
    ("a: [\n", "not valid YAML"),
])
def test_bad_run_files_exit_2(tmp_path, captured, text, message):
    (tmp_path / "run.yaml").write_text(text)
    res = CliRunner().invoke(app, ["llm_finetune", "--config", "run.yaml"])
    assert isinstance(res.exception, UserInputError) and message in str(res.exception), res.output
    assert not captured


def test_bad_run_file_exits_2_from_the_console_script(tmp_path):
    import subprocess
    import sys

    (tmp_path / "run.yaml").write_text("lop_n: 3\n")
    done = subprocess.run([str(Path(sys.executable).parent / "ftagent"), "llm_finetune", "--config", "run.yaml"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Did you mean 'loop_n'" in done.stderr, done.stderr


def test_missing_run_file(tmp_path):
    with pytest.raises(UserInputError, match="no such file"):
        load_run_file(tmp_path / "nope.yaml")


def test_a_task_described_by_a_run_file(tmp_path, monkeypatch):
    monkeypatch.setenv("FT_FILE_PATH", str(tmp_path / "ft"))
    (tmp_path / "run.yaml").write_text(RUN)
    (tmp_path / "tasks.json").write_text(json.dumps({"tasks": [
        {"config": "run.yaml"},
        {"config": "run.yaml", "loop_n": 4, "gpus": "0"},
    ]}))
    tasks, errors = read_tasks_file(tmp_path / "tasks.json")
    assert errors == [], errors
    a, b = tasks.tasks
    assert (a.model, a.benchmark, a.loop_n, a.timeout, a.scenario) == ("builtin/tiny-qwen2", "demo_add", 2, "90m",
                                                                       "learn to add")
    assert b.loop_n == 4 and b.gpus == "0"  # the task's own fields win
    plan = build_plan(tasks, job_id="j", log_base=tmp_path / "log", workspace_base=tmp_path / "ws",
                      ftagent_bin="ftagent", descriptions=["", ""])
    argv = plan.tasks[1].argv
    assert argv[argv.index("--config") + 1] == str(tmp_path / "run.yaml")  # upper_data_size_limit etc. travel
    assert argv[argv.index("--loop-n") + 1] == "4"  # and the flag overrides the file's loop_n


def test_a_task_with_a_bad_run_file(tmp_path):
    (tmp_path / "run.yaml").write_text("base_model: m\nbenchmark: demo_add\nloops: 3\n")
    (tmp_path / "tasks.json").write_text(json.dumps({"tasks": [{"config": "run.yaml"}]}))
    tasks, errors = read_tasks_file(tmp_path / "tasks.json")
    assert tasks is None and len(errors) == 1 and errors[0].startswith("task 0 config: ")
    assert "unknown key 'loops'" in errors[0]


def test_one_owner_of_the_did_you_mean_and_the_validation_message():
    """core.didyoumean.did_you_mean (re-exported by core.registry) is the one did-you-mean, UserInputError.from_validation the one shaping of a
    pydantic error for a user (run file, snapshot, setting): no module writes its own."""
    from pydantic import BaseModel, ValidationError

    root = Path(__file__).resolve().parents[2] / "ftagent"
    for source in root.rglob("*.py"):
        text = source.read_text(encoding="utf-8")
        if source.name != "didyoumean.py" or source.parent.name != "core":
            assert "get_close_matches" not in text, source

    class Inner(BaseModel):
        n: int

    class Outer(BaseModel):
        inner: Inner

    with pytest.raises(ValidationError) as info:
        Outer.model_validate({"inner": {"n": "x"}})
    assert str(UserInputError.from_validation(info.value, "run file r.yaml")).startswith(
        "run file r.yaml: 'inner.n': Input should be a valid integer")
    with pytest.raises(ValidationError) as info:
        Inner.model_validate([1])
    assert str(UserInputError.from_validation(info.value, "x")).startswith("x: Input should be")


def test_a_bad_value_names_its_key(tmp_path):
    (tmp_path / "run.yaml").write_text("loop_n: 0\n")
    with pytest.raises(UserInputError) as info:
        load_run_file(tmp_path / "run.yaml")
    assert str(info.value) == f"run file {tmp_path / 'run.yaml'}: loop_n=0: Input should be greater than or equal to 1"


@pytest.fixture
def planned(tmp_path, monkeypatch):
    """plan's options as they reach the forecast (nothing is measured)."""
    import ftagent.cli.run as cli_run

    monkeypatch.chdir(tmp_path)
    seen = []
    monkeypatch.setattr(cli_run, "_print_forecast", lambda options, as_json=False: seen.append(options))
    return seen


def test_plan_takes_the_run_file_llm_finetune_runs(tmp_path, planned):
    """A user plans, then runs, one run.yaml: plan's options are read from it (flags override), the keys that
    only say how a run is carried out (quiet, step_n, checkout) are skipped, not refused."""
    command = get_command(app).commands["plan"]
    # the launch plan's own options (--hardware and what goes with it) are not a run's settings
    assert {option_key(p) for p in command.params} - {"config", "hardware", "json", "ram", "train_config"} <= set(
        RunConfig.model_fields)
    (tmp_path / "run.yaml").write_text(RUN + "step_n: 4\ncheckout: false\n")
    res = CliRunner().invoke(app, ["plan", "--config", "run.yaml", "--loop-n", "5"])
    assert res.exit_code == 0, res.output
    o = planned[0]
    assert (o.benchmark, o.base_model, o.loop_n, o.timeout, o.upper_data_size_limit, o.user_target_scenario) == (
        "demo_add", "builtin/tiny-qwen2", 5, "90m", 300, "learn to add")


def test_plan_refuses_a_run_file_that_resumes(tmp_path, planned):
    (tmp_path / "run.yaml").write_text("path: log/s1\n")
    res = CliRunner().invoke(app, ["plan", "--config", "run.yaml"])
    assert isinstance(res.exception, UserInputError) and "'path' resumes a session" in str(res.exception)
    assert not planned
    (tmp_path / "run.yaml").write_text("loops: 3\n")
    res = CliRunner().invoke(app, ["plan", "--config", "run.yaml"])
    assert isinstance(res.exception, UserInputError) and "Did you mean 'loop_n'" in str(res.exception)
