"""`env check` / `doctor` against a real (fake-tool) venv, from any folder, with no ftagent in that env."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from ftagent.runners.toolenv import check_tools_env
from tests.fakes.toolenv import make_fake_tool_env

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fake_env(tmp_path_factory) -> Path:
    return make_fake_tool_env(tmp_path_factory.mktemp("fakeenv") / "tools")


@pytest.mark.parametrize("where", ["elsewhere", "repo"])
def test_a_healthy_env_checks_ok_from_any_folder(fake_env: Path, tmp_path: Path, monkeypatch, where) -> None:
    # issue 32 item 2: the check script imported ftagent, which only the source tree's folder provided
    monkeypatch.chdir(tmp_path if where == "elsewhere" else REPO)
    report = check_tools_env(fake_env, gpu=False)
    assert report.ok, report.errors
    assert report.versions == {"torch": "2.13.0+cpu", "transformers": "4.57.6", "llamafactory": "0.9.5",
                               "opencompass": "0.5.4", "peft": "0.18.1"}


def test_a_broken_tool_is_one_line_without_a_traceback(tmp_path: Path) -> None:
    env = make_fake_tool_env(tmp_path / "tools", broken="peft")
    report = check_tools_env(env, gpu=False)
    assert not report.ok
    assert report.errors == ["import peft: ImportError: libfoo.so: cannot open shared object file"]


def _doctor(monkeypatch, tmp_path: Path, env: Path):
    from ftagent.cli.main import app

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FT_FILE_PATH", str(tmp_path / "ff"))
    monkeypatch.setenv("FT_TOOLS_ENV", str(env))
    monkeypatch.setenv("FT_ENV_TYPE", "local")
    monkeypatch.setenv("FT_SANDBOX", "auto")
    return CliRunner().invoke(app, ["doctor"], catch_exceptions=False)


def test_doctor_gives_a_verdict_and_exits_0_when_ready(fake_env: Path, tmp_path: Path, monkeypatch) -> None:
    result = _doctor(monkeypatch, tmp_path, fake_env)
    assert result.exit_code == 0, result.output
    assert "verdict: ready" in result.output and "Traceback" not in result.output


def test_doctor_names_an_unknown_runner_and_checks_a_plugin_runner_by_its_capabilities(
        fake_env: Path, tmp_path: Path, monkeypatch) -> None:
    """FT_ENV_TYPE is checked against the runner registry (issue 33): a typo is a problem with a hint; a
    plug-in that does not declare ``uses_tools_env`` is not blamed for a broken tool env."""
    from ftagent.cli.main import app

    _doctor(monkeypatch, tmp_path, make_fake_tool_env(tmp_path / "tools", broken="llamafactory"))
    monkeypatch.setenv("FT_ENV_TYPE", "lcoal")
    result = CliRunner().invoke(app, ["doctor"], catch_exceptions=False)
    assert result.exit_code == 1 and "Did you mean 'local'" in result.output, result.output
    monkeypatch.setenv("FT_ENV_TYPE", "ftagent.runners.conda:CondaRunner")  # a dotted path, no tool env
    result = CliRunner().invoke(app, ["doctor"], catch_exceptions=False)
    assert "tool env" not in result.output.strip().splitlines()[-1], result.output


def test_doctor_exits_1_naming_a_broken_tool_env(tmp_path: Path, monkeypatch) -> None:
    env = make_fake_tool_env(tmp_path / "tools", broken="llamafactory")
    result = _doctor(monkeypatch, tmp_path, env)
    assert result.exit_code == 1, result.output
    verdict = result.output.strip().splitlines()[-1]
    assert verdict.startswith("verdict: NOT READY") and "ftagent env setup" in verdict
    assert "Traceback" not in result.output and "libfoo.so" in result.output


def _fake_pip(tmp_path: Path) -> list[str]:
    pip = tmp_path / "pip"
    pip.write_text('#!/bin/sh\necho "pip $*" >> "$(dirname "$0")/pip.log"\n')
    pip.chmod(0o755)
    return [str(pip)]


def test_setup_verifies_and_writes_its_marker_from_another_folder(tmp_path: Path, monkeypatch) -> None:
    # issue 32 item 2: outside the source tree the check failed, no marker was written, every retry reinstalled
    from ftagent.runners.toolenv import MARKER, setup_tools_env

    env = make_fake_tool_env(tmp_path / "tools")
    monkeypatch.chdir(tmp_path)
    pip = _fake_pip(tmp_path)
    first = setup_tools_env(env, gpu=False, pip_cmd=pip, step_timeout=60)
    assert not first.skipped and first.report.ok and (env / MARKER).is_file()
    installs = (tmp_path / "pip.log").read_text().count("install")
    again = setup_tools_env(env, gpu=False, pip_cmd=pip, step_timeout=60)
    assert again.skipped and again.report.ok
    assert (tmp_path / "pip.log").read_text().count("install") == installs  # nothing reinstalled


def test_setup_reinstalls_an_env_whose_marker_is_current_but_check_fails(tmp_path: Path) -> None:
    from ftagent.runners.toolenv import setup_tools_env

    env = make_fake_tool_env(tmp_path / "tools")
    pip = _fake_pip(tmp_path)
    setup_tools_env(env, gpu=False, pip_cmd=pip, step_timeout=60)
    peft = next((env / "lib").glob("python3*/site-packages")) / "peft" / "__init__.py"
    peft.write_text("raise ImportError('half removed')\n")  # broken after setup
    said: list[str] = []
    with pytest.raises(Exception, match="half removed"):  # the fake pip cannot repair it: the check still fails
        setup_tools_env(env, gpu=False, pip_cmd=pip, step_timeout=60, progress=said.append)
    assert any("reinstalling" in m for m in said)
