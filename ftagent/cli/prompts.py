"""`ftagent prompts`: print exactly what the LLM planner would be sent, offline.

Without ``--path`` the scenario is initialised as ``llm_finetune`` does it (datasets, base model,
benchmark data, LLaMA-Factory and dataset catalogues, GPU facts, memory estimate) except the baseline
evaluation, which takes minutes: the prompts then say "Baseline: not yet measured"; the datasets are
chosen by the rule (nothing is asked of an LLM). With ``--path``
(a session directory or snapshot) the session's own scenario, baseline and trace are used, so the
prompts are those of its next step. Nothing is sent to an LLM; the text is redacted like the logs.
"""

from __future__ import annotations

from pathlib import Path

import typer

from ftagent.cli.common import fail, prepare_env


def prompts(
    benchmark: str | None = typer.Option(None, "--benchmark", help="benchmark key (e.g. demo_add) or a benchmark YAML file"),
    base_model: str | None = typer.Option(None, "--base-model", help="HF repo id, local folder or builtin/<name>"),
    step: str | None = typer.Option(None, "--step", help="propose | data | config | feedback (default: all four)"),
    path: Path | None = typer.Option(None, "--path", help="a session directory or snapshot: use its scenario and trace"),
    dataset: str | None = typer.Option(None, "--dataset", help="raw dataset name, or 'all'"),
) -> None:
    """Show the prompts the LLM planner is sent: one step's requests (or all four's), with their token counts."""
    prepare_env()
    from ftagent.core.redact import Redactor
    from ftagent.planners.llm.preview import STEPS, as_text, preview  # STEPS: the one list of prompt steps

    if step is not None and step not in STEPS:
        fail(f"--step must be one of {', '.join(STEPS)}, not '{step}'")

    settings, scenario, trace, hypothesis, workspace = _load(benchmark, base_model, path, dataset)
    secrets = [settings.llm.openai_api_key.get_secret_value() if settings.llm.openai_api_key else None,
               settings.ft.judge_api_key.get_secret_value() if settings.ft.judge_api_key else None]
    redactor = Redactor(secrets)
    names = [s for s in STEPS if s == step] if step else list(STEPS)  # the checked --step, as its Step
    for name in names:
        text = as_text(preview(name, scenario, settings, trace, hypothesis=hypothesis, workspace=workspace))
        typer.echo(redactor.text(text))


def _load(benchmark, base_model, path, dataset):
    """(settings, scenario, trace, hypothesis, workspace) from a session or a fresh scenario.

    Both go through the one start-up (:func:`ftagent.finetune.start.start`) with the heuristic planner
    (offline: the datasets are chosen by the rule, no LLM is asked); a fresh scenario is built by
    ``FT_SCEN``, as ``llm_finetune`` builds it.
    """
    from ftagent.finetune.start import start

    if path is not None:
        from ftagent.engine.session import Session
        from ftagent.finetune.state import FinetuneSessionState

        if not Path(path).exists():
            fail(f"--path {path} does not exist")
        session, _ = Session.load(path, FinetuneSessionState)
        state = session.state
        if state.scenario is None:
            fail(f"--path {path}: the session has no scenario yet (it stopped before loop 0)")
        run = state.config.get("run", {})
        # as a resumed session: its benchmark FILE (a user YAML is registered again), its base model
        startup = start(benchmark=run.get("benchmark_file") or run.get("benchmark"), base_model=run.get("base_model"),
                        file_settings={},
                        planner="heuristic", check_datasets=False)
        loop = state.current
        hypothesis = loop.hypothesis if loop is not None else None
        workspace = Path(loop.code.workspace) if loop is not None and loop.code is not None else None
        return startup.settings, state.scenario, state.trace, hypothesis, workspace
    if not benchmark or not base_model:
        fail("pass --benchmark and --base-model (or --path SESSION)")
    startup = start(benchmark=benchmark, base_model=base_model, dataset=dataset, file_settings={}, planner="heuristic")
    return startup.settings, _scenario(startup), None, None, None


def _scenario(startup):
    """The scenario as ``llm_finetune`` builds it (the same start-up and ``FT_SCEN``), without the baseline."""
    startup.open_runner()  # nothing records its runs: no session
    prepared = startup.prepare(lambda event: None)
    return startup.builder.build(prepared)
