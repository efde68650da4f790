"""``ftagent plan``: the forecast of a session without running it (no session folder is written).

The start-up is ``llm_finetune``'s (the same options, bad input → :class:`UserInputError`, exit 2):
datasets, base model and benchmark data are prepared and the scenario built, then the baseline is
evaluated (a real OpenCompass run; it is cached by model and benchmark, so the session reuses it) and
the training probe runs (:mod:`ftagent.finetune.forecast`). Both measurements are cached under
``FT_FILE_PATH/forecast``: a second plan of the same session is instant.
"""

from __future__ import annotations

import time

from ftagent.core.durations import parse_duration
from ftagent.core.forecast import Forecast
from ftagent.core.trace import Trace


def plan_finetune(options) -> Forecast:
    """The forecast for ``options`` (:class:`~ftagent.finetune.app.FinetuneOptions`).

    Raises:
        UserInputError: bad options (exit 2), as ``llm_finetune``.
        EnvironmentFailure: the baseline or the probe cannot run (exit 1).
    """
    from ftagent.core.errors import EnvironmentFailure, UserInputError  # noqa: F401 (raised by the start-up)
    from ftagent.core.registry import load_object
    from ftagent.core.settings import load_settings
    from ftagent.finetune.app import choose_planner
    from ftagent.finetune.forecast import evaluation_cost, make_forecast, measure_training
    from ftagent.finetune.startup import construct, resolve_run
    from ftagent.runners.factory import get_runner
    from ftagent.runners.recording import RecordingRunner

    if options.path is not None:
        raise UserInputError("ftagent plan forecasts a new session: --path (resume) is not supported")
    started = time.monotonic()
    timeout_s = parse_duration(options.timeout) if options.timeout else None
    settings = load_settings(target_benchmark=options.benchmark, base_model=options.base_model,
                             dataset=options.dataset, upper_data_size_limit=options.upper_data_size_limit,
                             user_target_scenario=options.user_target_scenario,
                             benchmark_description=options.benchmark_description)
    run = resolve_run(settings, check_datasets=True)
    planner = choose_planner(settings)
    events: list = []
    runner = RecordingRunner(get_runner(settings), on_run=events.append)
    builder = construct(load_object(settings.ft.scen), settings, runner, events.append, optional={"run": run})
    scenario = builder.build(builder.prepare())
    builder.baseline(scenario, Trace(), lambda s: s)  # cached by model and benchmark: the session reuses it
    evaluation = evaluation_cost(settings, scenario, events)
    if evaluation is None:
        raise EnvironmentFailure("the baseline evaluation gave no timing to forecast from")
    try:
        train, _ = measure_training(scenario, settings, runner, run)
    except RuntimeError as exc:
        raise EnvironmentFailure(f"the training probe failed: {exc}") from exc
    loop_n = options.loop_n or 1
    return make_forecast(scenario, settings, train, evaluation, planner=planner, loop_n=loop_n,
                         timeout_s=timeout_s, baseline_needed=True, probe_cost_s=time.monotonic() - started)
