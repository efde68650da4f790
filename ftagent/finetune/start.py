"""The one start-up sequence: settings → :func:`~ftagent.finetune.resolve.resolve_run` (benchmark, base
model, dataset choice, planner from the registry) → runner (recorded where events are kept) → the
``FT_SCEN`` builder → prepare (build is the caller's: ``llm_finetune`` builds after its session exists).

Every command that names a benchmark and a base model comes here: ``ftagent llm_finetune`` and ``demo``
(:mod:`ftagent.finetune.app`, a resumed session too), ``plan`` (:mod:`ftagent.finetune.plan`), ``prompts``
(:mod:`ftagent.cli.prompts`), ``eval`` (:mod:`ftagent.finetune.score`) and ``job``'s task check
(:func:`resolve_tasks`), so none of them can drift from the others again
(``prompts`` once ignored ``FT_SCEN`` and a session's benchmark file). ``tests/unit/test_startup_single_source.py``
checks that each command calls :func:`start`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ftagent.core.errors import UserInputError
from ftagent.core.settings import Settings
from ftagent.finetune.resolve import ResolvedRun

Emit = Callable[[Any], None]


class Startup:
    """What start-up resolved (``settings`` as loaded, ``run``: the resolved facts) and, once opened,
    the runner and the ``FT_SCEN`` builder."""

    def __init__(self, settings: Settings, run: ResolvedRun) -> None:
        self.settings = settings
        self.run = run
        self.runner: Any = None
        self.builder: Any = None

    @property
    def planner(self) -> str:
        """The planner's registry name (``FT_PLANNER`` resolved, or the caller's choice)."""
        return self.run.planner

    def open_runner(self, on_run: Emit | None = None) -> Any:
        """The settings' runner (``FT_ENV_TYPE``); with ``on_run`` every run it makes is recorded there."""
        from ftagent.runners.factory import get_runner
        from ftagent.runners.recording import RecordingRunner

        runner = get_runner(self.settings)
        self.runner = RecordingRunner(runner, on_run=on_run) if on_run is not None else runner
        return self.runner

    def prepare(self, emit: Emit) -> Any:
        """Build the ``FT_SCEN`` builder (``Cls(settings, runner, emit, run=run)``: a plug-in takes ``run=``
        too) and prepare base model, datasets and benchmark data (bad input raises before any session)."""
        from ftagent.core.registry import load_object

        if self.runner is None:
            self.open_runner(emit)
        self.builder = load_object(self.settings.ft.scen)(self.settings, self.runner, emit, run=self.run)
        return self.builder.prepare()


def start(*, benchmark: str | None, base_model: str | None, file_settings: Mapping[str, Any], dataset: str | None = None,
          upper_data_size_limit: int | None = None, user_target_scenario: str | None = None,
          benchmark_description: str | None = None, planner: str | None = None, check_datasets: bool = True,
          check_data: bool | None = None, fetchable: bool = True) -> Startup:
    """Load the settings with the command's options and resolve them (nothing is written).

    ``file_settings``: a run file's settings by name (:class:`ftagent.core.run_config.RunFile`; ``{}`` without
    one), below the options and the environment; ``planner`` replaces ``FT_PLANNER`` (``prompts``: ``heuristic``);
    the check flags are :func:`~ftagent.finetune.resolve.resolve_run`'s.

    Raises:
        UserInputError: bad options (exit 2).
    """
    from ftagent.core.settings import load_settings
    from ftagent.finetune.resolve import resolve_run

    settings = load_settings(file_settings, target_benchmark=benchmark, base_model=base_model, dataset=dataset,
                             upper_data_size_limit=upper_data_size_limit,
                             user_target_scenario=user_target_scenario,
                             benchmark_description=benchmark_description)
    run = resolve_run(settings, planner=planner, check_datasets=check_datasets, check_data=check_data,
                      fetchable=fetchable)
    return Startup(settings, run)


def resolve_tasks(tasks: list[Any]) -> tuple[list[ResolvedRun], list[str]]:
    """``ftagent job``: every task of a validated tasks.json through :func:`start`, before any starts.

    Each task gets its own settings (its benchmark, base model and description); its dataset was checked
    by :func:`ftagent.jobs.tasks.validate_tasks` (a user file is copied by the task's own session).

    Returns:
        One :class:`ResolvedRun` per task (in order) and one line per task that does not resolve
        (``task <i>: <why>``; then the job must not start).
    """
    runs, errors = [], []
    for i, task in enumerate(tasks):
        try:
            runs.append(start(benchmark=task.benchmark, base_model=task.model, file_settings={},
                              benchmark_description=task.benchmark_description, check_datasets=False,
                              check_data=True, fetchable=False).run)
        except UserInputError as exc:
            errors.append(f"task {i}: {exc}")
    return runs, errors
