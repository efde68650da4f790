"""Issue 44: the run file is the whole recipe — llm_finetune's options and every setting by its settings name,
flags > environment > run file > .env > defaults, secrets refused naming the key, one loader for
``llm_finetune``/``plan``/tasks.json, and ``ftagent config show`` saying where each value came from."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ftagent.cli.main import app
from ftagent.core.errors import UserInputError
from ftagent.core.run_config import load_run_file, parse_recipe
from ftagent.core.settings import load_settings

RECIPE = """\
benchmark: demo_add
base_model: builtin/tiny-qwen2
loop_n: 1
planner: heuristic
sota_rule: delta
report_to: tensorboard
FT_BENCHMARK_LIMIT: 20
guard_benchmarks: gsm8k,mmlu
log_path: runs
"""


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No FT_* / LLM settings from the caller's environment; the working directory is tmp_path."""
    import os

    import ftagent.core.envfile as envfile

    for key in list(os.environ):
        if key.upper().startswith(("FT_", "CHAT_", "OPENAI_", "LOG_PATH", "WORKSPACE_PATH")):
            monkeypatch.delenv(key)
    for key in (envfile.MARK, "FT_SOTA_RULE", "FT_REPORT_TO", "FT_GUARD_SAMPLE", "FT_SOTA_MIN_DELTA", "FT_PLANNER"):
        monkeypatch.setenv(key, "")  # what a test's .env puts into os.environ is removed after it
        monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(envfile, "_loaded", {})
    return tmp_path


@pytest.fixture
def captured(clean_env, monkeypatch):
    """llm_finetune's options as they reach run_finetune (no session is run)."""
    import ftagent.finetune.app as finetune_app
    from ftagent.engine.loop import RunSummary

    seen = []
    monkeypatch.setattr(finetune_app, "run_finetune",
                        lambda options: seen.append(options) or RunSummary(status="completed", loops_done=0,
                                                                           steps_run=0))
    return seen


def test_settings_by_name_reach_the_run(clean_env, captured):
    """Before issue 44, `planner: heuristic` exited 2 ("unknown key 'planner'. Did you mean 'plan'?")."""
    (clean_env / "run.yaml").write_text(RECIPE)
    res = CliRunner().invoke(app, ["llm_finetune", "--config", "run.yaml"])
    assert res.exit_code == 0, res.output
    options = captured[0]
    assert (options.benchmark, options.loop_n) == ("demo_add", 1)
    assert options.settings == {"planner": "heuristic", "sota_rule": "delta", "report_to": "tensorboard",
                                "benchmark_limit": 20, "guard_benchmarks": ["gsm8k", "mmlu"],
                                "log_path": str(clean_env / "runs")}  # a path setting: beside the run file
    settings = load_settings(options.settings)  # what start() builds the session's settings with
    assert (settings.ft.planner, settings.ft.sota_rule, settings.ft.report_to, settings.ft.benchmark_limit) == (
        "heuristic", "delta", "tensorboard", 20)
    assert settings.paths.log_path == clean_env / "runs"


def test_plan_gets_the_same_settings(clean_env, monkeypatch):
    import ftagent.cli.run as cli_run

    seen = []
    monkeypatch.setattr(cli_run, "_print_forecast", lambda options, as_json=False: seen.append(options))
    (clean_env / "run.yaml").write_text(RECIPE + "quiet: true\n")
    res = CliRunner().invoke(app, ["plan", "--config", "run.yaml"])
    assert res.exit_code == 0, res.output
    assert seen[0].settings["sota_rule"] == "delta" and seen[0].settings["planner"] == "heuristic"


def test_the_order_flags_environment_run_file_dotenv_defaults(clean_env, monkeypatch):
    from ftagent.cli.common import prepare_env

    (clean_env / ".env").write_text("FT_SOTA_RULE=interval\nFT_REPORT_TO=wandb\nFT_GUARD_SAMPLE=7\n")
    prepare_env()  # .env is in os.environ now, recorded as .env's
    monkeypatch.setenv("FT_PLANNER", "llm")  # the environment
    run = parse_recipe({"planner": "heuristic", "sota_rule": "delta", "upper_data_size_limit": 10}, "r", None)
    settings = load_settings(run.settings, upper_data_size_limit=99)
    assert settings.ft.planner == "llm"  # environment > run file
    assert settings.ft.sota_rule == "delta"  # run file > .env
    assert settings.ft.report_to == "wandb" and settings.ft.guard_sample == 7  # .env > defaults
    assert settings.ft.upper_data_size_limit == 99  # flag > all
    assert settings.ft.sota_min_delta == 0.0  # default


def test_the_environment_overrides_an_option_of_the_file(clean_env, captured, monkeypatch):
    """base_model is FT_BASE_MODEL: the environment wins over the file, a flag over both."""
    (clean_env / "run.yaml").write_text(RECIPE)
    monkeypatch.setenv("FT_BASE_MODEL", "Qwen/Qwen2.5-0.5B")
    assert CliRunner().invoke(app, ["llm_finetune", "--config", "run.yaml"]).exit_code == 0
    assert captured[-1].base_model is None  # start() then reads FT_BASE_MODEL
    assert CliRunner().invoke(app, ["llm_finetune", "--config", "run.yaml", "--base-model", "m/x"]).exit_code == 0
    assert captured[-1].base_model == "m/x"


@pytest.mark.parametrize("text, message", [
    ("plan: llm\n", "plan=llm: Input should be a valid boolean"),  # the option, and the setting named
    ("sota_rul: delta\n", "unknown key 'sota_rul'. Did you mean 'sota_rule'?"),
    ("lop_n: 2\n", "unknown key 'lop_n'. Did you mean 'loop_n'?"),
    ("sota_rule: fast\n", "sota_rule=fast: Input should be 'interval' or 'delta'"),
    ("FT_PLANNER: llm\nplanner: heuristic\n", "'FT_PLANNER' and 'planner' both set planner"),
    ("benchmark: demo_add\ntarget_benchmark: gsm8k\n", "'benchmark' and 'target_benchmark' both set benchmark"),
])
def test_bad_keys_and_values_name_the_key(tmp_path, text, message):
    (tmp_path / "run.yaml").write_text(text)
    with pytest.raises(UserInputError) as info:
        load_run_file(tmp_path / "run.yaml")
    assert message in str(info.value), info.value
    if text.startswith("plan:"):
        assert "'planner' is the setting that takes 'llm'" in str(info.value)


@pytest.mark.parametrize("text, key, where", [
    ("openai_api_key: sk-abc\n", "'openai_api_key' is a secret", "OPENAI_API_KEY"),
    ("FT_JUDGE_API_KEY: sk-abc\n", "'FT_JUDGE_API_KEY' is a secret", "FT_JUDGE_API_KEY"),
    ("hf_token: hf_abc\n", "'hf_token' is a secret", "HF_TOKEN"),
    ("chat_model_map:\n  gpt-4o:\n    api_key: sk-abc\n", "'chat_model_map' holds a secret (its key 'api_key')",
     "environment"),
    ("openai_api_base: https://user:pw@llm.example/v1\n", "'openai_api_base' holds a secret (a password in its URL)",
     "environment"),
])
def test_a_secret_is_refused_naming_the_key(tmp_path, text, key, where):
    (tmp_path / "run.yaml").write_text(RECIPE + text)
    with pytest.raises(UserInputError) as info:
        load_run_file(tmp_path / "run.yaml")
    assert key in str(info.value) and where in str(info.value)
    assert "sk-abc" not in str(info.value) and "pw@" not in str(info.value)


def test_a_secret_exits_2_before_anything_is_written(tmp_path):
    (tmp_path / "run.yaml").write_text(RECIPE + "openai_api_key: sk-secret-value\n")
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("FT_", "LOG_PATH", "WORKSPACE_PATH"))}
    done = subprocess.run([str(Path(sys.executable).parent / "ftagent"), "llm_finetune", "--config", "run.yaml"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 2 and "'openai_api_key' is a secret" in done.stderr, done.stderr
    assert "sk-secret-value" not in done.stderr + done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.yaml"]  # no log/, runs/, git_ignore_folder/


def test_a_task_whose_run_file_holds_settings(clean_env, monkeypatch):
    from ftagent.jobs.tasks import build_plan, read_tasks_file

    monkeypatch.setenv("FT_FILE_PATH", str(clean_env / "ft"))
    (clean_env / "run.yaml").write_text(RECIPE)
    (clean_env / "tasks.json").write_text(json.dumps({"tasks": [{"config": "run.yaml"}]}))
    tasks, errors = read_tasks_file(clean_env / "tasks.json")
    assert errors == [] and tasks.tasks[0].model == "builtin/tiny-qwen2"
    plan = build_plan(tasks, job_id="j", log_base=clean_env / "log", workspace_base=clean_env / "ws",
                      ftagent_bin="ftagent", descriptions=[""])
    argv = plan.tasks[0].argv
    assert argv[argv.index("--config") + 1] == str(clean_env / "run.yaml")  # the settings travel with the file
    (clean_env / "run.yaml").write_text(RECIPE + "openai_api_key: sk-x\n")
    tasks, errors = read_tasks_file(clean_env / "tasks.json")
    assert tasks is None and "'openai_api_key' is a secret" in errors[0]


def test_config_show_says_where_each_value_came_from(clean_env, monkeypatch):
    (clean_env / ".env").write_text("FT_SOTA_MIN_DELTA=0.5\nFT_PLANNER=llm\n")
    (clean_env / "run.yaml").write_text(RECIPE)
    monkeypatch.setenv("FT_BENCHMARK_LIMIT", "10")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-shown-never")
    res = CliRunner().invoke(app, ["config", "show", "run.yaml", "--json"])
    assert res.exit_code == 0, res.output
    by_key = {v["key"]: v for v in json.loads(res.output)["values"]}
    run_file = str(clean_env / "run.yaml")
    assert by_key["planner"] == {"key": "planner", "kind": "setting", "value": "heuristic", "source": "run file",
                                 "via": run_file}  # the run file beats .env's FT_PLANNER=llm
    assert (by_key["benchmark_limit"]["value"], by_key["benchmark_limit"]["source"],
            by_key["benchmark_limit"]["via"]) == (10, "environment", "FT_BENCHMARK_LIMIT")
    assert (by_key["sota_min_delta"]["value"], by_key["sota_min_delta"]["source"]) == (0.5, ".env")
    assert (by_key["loop_n"]["value"], by_key["loop_n"]["source"]) == (1, "run file")
    assert (by_key["final_eval"]["value"], by_key["final_eval"]["source"]) == ("full", "default")
    assert by_key["openai_api_key"]["value"] == "**********" and "sk-shown-never" not in res.output
    text = CliRunner().invoke(app, ["config", "show", "run.yaml"]).output
    assert "environment (FT_BENCHMARK_LIMIT)" in text and "sota_rule" in text and "final_eval" not in text


def test_a_child_process_knows_what_came_from_dotenv(clean_env, monkeypatch):
    """An MCP server's run or a job's task inherits the parent's environment, .env's values included: those stay
    below the run file in the child too, unless the parent set the variable to another value itself."""
    import ftagent.core.envfile as envfile
    from ftagent.cli.common import prepare_env

    (clean_env / ".env").write_text("FT_PLANNER=llm\nFT_REPORT_TO=wandb\n")
    prepare_env()
    monkeypatch.setattr(envfile, "_loaded", {})  # now as in a child: only the inherited environment
    assert envfile.dotenv_keys() == {"FT_PLANNER", "FT_REPORT_TO"}
    monkeypatch.setenv("FT_REPORT_TO", "mlflow")  # the parent chose this one for its child
    assert envfile.dotenv_keys() == {"FT_PLANNER"}
    settings = load_settings(parse_recipe({"planner": "heuristic", "report_to": "tensorboard"}, "r", None).settings)
    assert (settings.ft.planner, settings.ft.report_to) == ("heuristic", "mlflow")
