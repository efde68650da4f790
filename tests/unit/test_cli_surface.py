"""Issue 32 item 7: the CLI's surface — full option names, value names instead of <bool>/<str>, -h, --version,
plain `export`/`prompts` commands, help on every option, list headers, no "None" or mixed durations in a report."""

from __future__ import annotations

import re
from importlib.metadata import version

import pytest
from typer.testing import CliRunner

from ftagent.cli import app
from ftagent.views.report import LoopRow, Report, best_label, render_markdown

COMMANDS = ["llm_finetune", "demo", "plan", "report", "doctor", "ui", "prompts", "export",
            "benchmarks list", "datasets list", "datasets prepare", "env setup", "job run", "models build"]


def _help(args: list[str]) -> str:
    result = CliRunner().invoke(app, [*args, "--help"], env={"TERMINAL_WIDTH": ""})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("command", COMMANDS)
def test_help_names_values_not_python_types(command):
    text = _help(command.split())
    assert not re.search(r"<(bool|str|int|float|int range|path)>", text), text


def test_long_option_names_are_not_cut():
    text = _help(["llm_finetune"])
    for option in ("--benchmark-description", "--upper-data-size-limit", "--user-target-scenario"):
        assert option in text, text
    assert "…" not in text.split("Options")[1].split("\n")[1]


def test_every_option_of_the_run_commands_has_help():
    from typer.main import get_command

    from ftagent.cli.main import app as root

    group = get_command(root)
    for name in ("llm_finetune", "plan", "demo", "export", "prompts"):
        for param in group.commands[name].params:
            assert param.help, f"{name} {param.opts} has no help"


def test_dash_h_is_help_everywhere():
    runner = CliRunner()
    for args in ([], ["llm_finetune"], ["job", "run"], ["export"]):
        result = runner.invoke(app, [*args, "-h"])
        assert result.exit_code == 0 and "Usage:" in result.output, (args, result.output)


def test_version_comes_from_the_package_metadata():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"ftagent {version('ftagent')}"


@pytest.mark.parametrize("command", ["export", "prompts"])
def test_single_commands_are_not_groups(command):
    text = _help([command])
    assert "COMMAND [ARGS]" not in text


def test_export_still_takes_options_after_the_session(tmp_path):
    from ftagent.core.errors import UserInputError

    result = CliRunner().invoke(app, ["export", str(tmp_path / "nope"), "--loop", "1"])
    assert isinstance(result.exception, UserInputError) and "not a session directory" in str(result.exception)


def test_list_commands_print_a_header():
    runner = CliRunner()
    benchmarks = runner.invoke(app, ["benchmarks", "list"]).output.splitlines()
    assert benchmarks[0].split()[:3] == ["KEY", "CATEGORY", "METRIC"], benchmarks[:2]
    datasets = runner.invoke(app, ["datasets", "list"]).output.splitlines()
    assert datasets[0].split()[:2] == ["NAME", "SOURCE"], datasets[:2]


def test_report_never_says_loop_none_and_uses_one_duration_format():
    report = Report(session="s", status="completed", baseline_val=10.0, wall_time_s=310.0, training_time_s=87.0,
                    loops=[LoopRow(loop=0, hypothesis="h", config={}, val_score=None, test_score=None,
                                   decision=False, status="failed", duration_s=87.0)])
    md = render_markdown(report)
    assert "None" not in md and "best (none beat the baseline)" in md
    assert "5 min 10 s" in md and "1 min 27 s" in md and not re.search(r"\d+s\b", md), md
    assert best_label(2) == "best (loop 2)"
