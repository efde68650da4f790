"""CLI: one clear message and exit code 2 for bad input, nothing written; light start-up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ftagent.core.durations import parse_duration
from ftagent.core.errors import UserInputError

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("litellm", "torch", "datasets", "streamlit", "transformers", "pandas")


def run_cli(args, cwd, env_extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FT_", "CHAT_", "OPENAI_"))}
    env.update({"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", **(env_extra or {})})
    return subprocess.run([sys.executable, "-m", "ftagent", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("text,seconds", [("12h", 43200), ("90m", 5400), ("1h30m", 5400), ("45s", 45),
                                          ("3600", 3600), ("2d", 172800), (" 1.5h ", 5400)])
def test_valid_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["12x", "-1h", "h", "", "0", "30m1h", "1h1h", "1 h 30"])
def test_invalid_durations(text):
    with pytest.raises(UserInputError):
        parse_duration(text)


def _assert_user_error(result, *fragments):
    assert result.returncode == 2, result.stderr + result.stdout
    err = result.stderr
    assert err.count("error:") == 1, err  # one clear message, no traceback
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in err, err


BASE = ["llm_finetune", "--base-model", "builtin/tiny-qwen2"]


def test_unknown_benchmark_lists_valid_keys_and_suggests(tmp_path):
    result = run_cli(["llm_finetune", "--benchmark", "aime52", "--base-model", "Qwen/Qwen2.5-7B-Instruct"],
                     tmp_path)
    _assert_user_error(result, "aime52", "Did you mean 'aime25'", "demo_add")
    assert not any(tmp_path.iterdir())  # nothing written


def test_missing_benchmark_explains(tmp_path):
    result = run_cli(["llm_finetune", "--base-model", "builtin/tiny-qwen2", "--user-target-scenario", "x"],
                     tmp_path)
    _assert_user_error(result, "no benchmark", "--benchmark")


def test_missing_base_model(tmp_path):
    _assert_user_error(run_cli(["llm_finetune", "--benchmark", "demo_add"], tmp_path), "no base model")


@pytest.mark.parametrize("model", ["not a model", "/does/not/exist", "builtin/huge-qwen"])
def test_bad_base_model(tmp_path, model):
    _assert_user_error(run_cli(["llm_finetune", "--benchmark", "demo_add", "--base-model", model], tmp_path),
                       model)


@pytest.mark.parametrize("timeout", ["12x", "-1h"])
def test_bad_timeout(tmp_path, timeout):
    result = run_cli([*BASE, "--benchmark", "demo_add", "--timeout", timeout], tmp_path)
    _assert_user_error(result, f"invalid timeout '{timeout}'")


def test_path_that_is_not_a_snapshot(tmp_path):
    (tmp_path / "x.json").write_text("{}")
    result = run_cli([*BASE, "--benchmark", "demo_add", "--path", str(tmp_path / "x.json")], tmp_path)
    _assert_user_error(result, "is not a snapshot")
    result = run_cli([*BASE, "--path", str(tmp_path / "missing")], tmp_path)
    _assert_user_error(result, "does not exist")


def test_corrupted_snapshot_path(tmp_path):
    snap = tmp_path / "log" / "s1" / "__session__" / "0" / "0_propose"
    snap.parent.mkdir(parents=True)
    snap.write_text("{not json")
    _assert_user_error(run_cli([*BASE, "--path", str(snap)], tmp_path), "corrupted")


def test_malformed_dotenv(tmp_path):
    (tmp_path / ".env").write_text("FT_BASE_MODEL=builtin/tiny-qwen2\noops no equals sign\n")
    result = run_cli(["llm_finetune", "--benchmark", "demo_add"], tmp_path)
    _assert_user_error(result, ".env:2", "KEY=VALUE")


def test_invalid_setting_value_from_environment(tmp_path):
    result = run_cli([*BASE, "--benchmark", "demo_add"], tmp_path, {"FT_ENV_TYPE": "kubernetes"})
    _assert_user_error(result, "FT_ENV_TYPE", "local")


def test_unknown_option_is_exit_2(tmp_path):
    assert run_cli(["llm_finetune", "--bogus"], tmp_path).returncode == 2


PROBE = """
import sys, time
t0 = time.perf_counter()
from ftagent.cli import app
try:
    app({args!r})
except SystemExit:
    pass
heavy = [m for m in {heavy!r} if m in sys.modules]
print(repr((heavy, time.perf_counter() - t0)))
"""


@pytest.mark.parametrize("args", [["--help"], ["llm_finetune", "--help"], ["benchmarks", "--help"]])
def test_help_imports_no_heavy_modules(tmp_path, args):
    code = PROBE.format(args=args, heavy=HEAVY)
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    heavy, seconds = eval(out.stdout.strip().splitlines()[-1])
    assert heavy == [], f"--help imported {heavy}"
    print(f"ftagent {' '.join(args)}: {seconds:.2f}s")


def test_help_lists_the_command_groups(tmp_path):
    t0 = time.perf_counter()
    result = run_cli(["--help"], tmp_path)
    assert result.returncode == 0
    for name in ("llm_finetune", "demo", "benchmarks", "datasets", "env", "doctor", "ui", "job"):
        assert name in result.stdout
    print(json.dumps({"ftagent --help wall (s)": round(time.perf_counter() - t0, 2)}))


def test_plan_flag_forecasts_a_new_session_only(tmp_path):
    result = run_cli([*BASE, "--benchmark", "demo_add", "--path", str(tmp_path / "old_session"), "--plan"], tmp_path)
    _assert_user_error(result, "--plan forecasts a new session", "ftagent report")
    assert not any(tmp_path.iterdir())  # nothing written


def test_plan_flag_bad_benchmark_exits_2_without_a_session(tmp_path):
    result = run_cli([*BASE, "--benchmark", "aime52", "--plan"], tmp_path)
    _assert_user_error(result, "aime52", "Did you mean 'aime25'")
    assert not any(tmp_path.iterdir())
