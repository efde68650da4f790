"""`ftagent eval`: score any model on a benchmark split, with no session (issue 31 item 4)."""

from __future__ import annotations

from pathlib import Path

import typer

from ftagent.cli.common import prepare_env


def eval_model(
    model: str = typer.Option(..., "--model", metavar="PATH|HUB_ID|SESSION_DIR",
                              help="a model folder, builtin/<name>, an HF repo id, or a session directory (its best model)"),
    benchmark: str | None = typer.Option(None, "--benchmark", metavar="KEY|FILE",
                                         help="benchmark key or YAML file (default: the session's, for a session directory)"),
    split: str = typer.Option("test", "--split", metavar="validation|test|full",
                              help="items to score: validation, test, or full (every item outside validation)"),
    against: str | None = typer.Option(None, "--against", metavar="PATH|HUB_ID|SESSION_DIR",
                                       help="a second model: also prints the paired difference on the same items"),
    out: Path | None = typer.Option(None, "--out", metavar="FILE",
                                    help="the JSON result (default ./ftagent-eval-<model>-<benchmark>.json)"),
    as_json: bool = typer.Option(False, "--json", help="print the JSON result instead of the lines"),
) -> None:
    """Score a model on a benchmark split with the session's evaluation, its 95 % interval, and a JSON file."""
    prepare_env()
    from ftagent.engine.session import write_atomic
    from ftagent.finetune.score import check_out, default_out, report_lines, run_eval

    if out is not None:  # before the evaluation (issue 43: a traceback after it, the result lost)
        check_out(out)
    report = run_eval(model, benchmark, split, against)
    text = report.model_dump_json(indent=2)
    target = out or default_out(model, report.benchmark)
    write_atomic(Path(target), text)
    if as_json:
        typer.echo(text)
        return
    for line in report_lines(report):
        typer.echo(line)
    typer.echo(f"written: {target}")
