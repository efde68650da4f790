"""``ftagent plan``: the forecast of a session without running it (no session folder is written).

The start-up is ``llm_finetune``'s (:func:`ftagent.finetune.start.start`: the same options, bad input →
:class:`UserInputError`, exit 2):
datasets, base model and benchmark data are prepared and the scenario built, then the baseline is
evaluated (a real OpenCompass run; it is cached by model and benchmark, so the session reuses it) and
the training probe runs (:mod:`ftagent.finetune.probes`). Both measurements are cached under
``FT_FILE_PATH/forecast``: a second plan of the same session is instant.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ftagent.core.durations import parse_duration
from ftagent.core.forecast_arithmetic import Forecast
from ftagent.core.trace import Trace

if TYPE_CHECKING:
    from pathlib import Path

    from ftagent.finetune.app import FinetuneOptions
    from ftagent.tools.launch.plan import LaunchPlan
    from ftagent.tools.launch.preflight import Verdict


def plan_finetune(options: FinetuneOptions, progress: Callable[[str], None] | None = None) -> Forecast:
    """The forecast for ``options`` (:class:`~ftagent.finetune.app.FinetuneOptions`).

    ``progress`` is told each stage as it starts (the CLI's heartbeat: the baseline and the probe take
    minutes on a real model).

    Raises:
        UserInputError: bad options (exit 2), as ``llm_finetune``.
        EnvironmentFailure: the baseline or the probe cannot run (exit 1).
    """
    from ftagent.core.errors import EnvironmentFailure, UserInputError  # noqa: F401 (raised by the start-up)
    from ftagent.finetune.probe_cache import PROBE_MAX_AGE_S, cached_probe, train_key
    from ftagent.finetune.probes import evaluation_cost, first_recipe, measure_training, no_deadline
    from ftagent.finetune.session_forecast import make_forecast
    from ftagent.finetune.start import start

    if options.path is not None:
        raise UserInputError("ftagent plan forecasts a new session: --path (resume) is not supported")
    say = progress or (lambda _text: None)
    started = time.monotonic()
    timeout_s = parse_duration(options.timeout) if options.timeout else None
    startup = start(benchmark=options.benchmark, base_model=options.base_model, dataset=options.dataset,
                    file_settings=options.settings,
                    upper_data_size_limit=options.upper_data_size_limit,
                    user_target_scenario=options.user_target_scenario,
                    benchmark_description=options.benchmark_description)
    settings, run, planner = startup.settings, startup.run, startup.planner
    events: list[Any] = []  # the runner's run records, whatever the runner emits
    runner = startup.open_runner(on_run=events.append)
    say("preparing: base model, datasets, benchmark data, catalogues")
    prepared = startup.prepare(events.append)
    builder = startup.builder
    scenario = builder.build(prepared)
    say("evaluating the base model (the baseline: one OpenCompass run, cached by model and benchmark)")
    builder.baseline(scenario, Trace(), lambda s: s)  # cached by model and benchmark: the session reuses it
    evaluation = evaluation_cost(settings, scenario, events)
    if evaluation is None:
        raise EnvironmentFailure("the baseline evaluation gave no timing to forecast from")
    if cached_probe(settings.ft.file_path, train_key(scenario, first_recipe(scenario))) is None:
        say(f"measuring the training speed (a short LLaMA-Factory run of the first recipe; cached for "
            f"{PROBE_MAX_AGE_S / 3600:.0f} h under this load)")
    try:
        train, _ = measure_training(scenario, settings, runner, run, limit=no_deadline)
    except RuntimeError as exc:
        raise EnvironmentFailure(f"the training probe failed: {exc}") from exc
    loop_n = options.loop_n or 1
    return make_forecast(scenario, settings, train, evaluation, planner=planner, loop_n=loop_n,
                         timeout_s=timeout_s, baseline_needed=True, probe_cost_s=time.monotonic() - started)


def plan_hardware(base_model: str | None, hardware: str, *, file_settings: Mapping[str, Any],
                  benchmark: str | None = None, ram_gb: float | None = None) -> LaunchPlan:
    """``ftagent plan --hardware SPEC``: the launch plan of ``base_model`` on hardware described, not
    detected (no GPU, no baseline, no training probe); its preflight verdicts included. The same function
    makes the session's own plan (:func:`ftagent.finetune.hardware_plan.make_plan`).

    ``base_model``: a local folder holding (at least) ``config.json``, a folder already under
    ``FT_FILE_PATH/models``, or an HF id whose ``config.json`` alone is fetched. ``ram_gb``: the host's
    RAM (``--ram``); None: unknown, and CPU offload is not considered (the plan says so). ``file_settings``:
    the run file's settings by name (``--config``), as a session gets them (``FT_CPU_OFFLOAD`` among them).

    Raises:
        UserInputError: bad SPEC, no --base-model, an unknown benchmark, an unreadable config.json (exit 2).
        EnvironmentFailure: the Hub could not be reached for an HF id's config.json (exit 1).
    """
    from ftagent.core.errors import UserInputError
    from ftagent.core.settings import load_settings
    from ftagent.finetune.hardware_plan import make_plan
    from ftagent.tools.launch.profiles import parse_hardware_spec
    from ftagent.tools.opencompass.inference import inference_settings

    profile = parse_hardware_spec(hardware)
    if not base_model:
        raise UserInputError("--hardware needs --base-model (a folder holding config.json, or an HF id)")
    if ram_gb is not None and not 0 < ram_gb < 1e6:
        raise UserInputError(f"--ram {ram_gb:g}: the host's RAM in GB, more than 0 and below 1,000,000")
    if benchmark:
        from ftagent.benchmarks import get_benchmark

        get_benchmark(benchmark)  # an unknown key is one clear error, as for llm_finetune
    config = _model_config(base_model)
    name = base_model.rstrip("/")
    try:
        plan = make_plan(config, profile, name=name, inference=inference_settings(name).values, cpu_ram_gb=ram_gb,
                         settings=load_settings(file_settings))
    except (KeyError, TypeError) as exc:
        raise UserInputError(f"config.json of {base_model} lacks {exc} (hidden_size, num_hidden_layers and "
                             "vocab_size are needed)") from exc
    if benchmark:
        plan.notes.append(f"benchmark {benchmark}: evaluated with max_model_len {plan.max_model_len}")
    from ftagent.core.settings import load_settings
    from ftagent.finetune.stage_prepare import stage_plan_notes

    plan.notes += stage_plan_notes(config, plan.method, plan.per_gpu_memory_gb, profile.gpu_count,
                                   list(load_settings().ft.stages))  # issue 40: each enabled stage
    return plan


def check_train_config(plan: LaunchPlan, path: Path) -> list[Verdict]:
    """``ftagent plan --hardware … --train-config FILE``: the validator's train.yaml preflight on a file, as
    the run would get it — the system-managed keys (``configs/llamafactory/defaults.yaml``), the precision
    of these GPUs and the DeepSpeed config the plan names for its method put in first.

    Raises:
        UserInputError: the file is missing or not a YAML mapping (exit 2).
    """
    from ftagent.core.errors import UserInputError
    from ftagent.core.yamlio import load_yaml_text
    from ftagent.tools.launch.preflight import train_config_verdicts
    from ftagent.tools.launch.profiles import precision_config
    from ftagent.tools.llamafactory.config import load_lf_defaults
    from ftagent.tools.llamafactory.launch import choose_deepspeed

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserInputError(f"--train-config {path}: cannot read it ({type(exc).__name__})") from exc
    config = load_yaml_text(text, str(path))
    if not isinstance(config, dict):
        raise UserInputError(f"--train-config {path}: a train.yaml is a mapping of LLaMA-Factory keys")
    defaults = load_lf_defaults()
    final = {**config, **defaults.system_managed}
    final.update(precision_config(plan.precision) if plan.gpu_count else defaults.cpu.get("config", {}))
    chosen, _ = choose_deepspeed(final, memory=plan.memory.model_dump(mode="json"), gpu_count=plan.gpu_count)
    final.pop("deepspeed", None)
    if chosen:
        final["deepspeed"] = chosen
    return train_config_verdicts(plan, final, gpus=plan.hardware)


def _model_config(base_model: str) -> dict[str, Any]:
    import json
    from pathlib import Path

    from ftagent.core.errors import EnvironmentFailure, UserInputError
    from ftagent.core.paths import models_dir
    from ftagent.core.settings import load_settings

    candidates = [Path(base_model).expanduser(), models_dir(Path(load_settings().ft.file_path)) / base_model]
    for folder in candidates:
        if (folder / "config.json").is_file():
            try:
                data = json.loads((folder / "config.json").read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise UserInputError(f"{folder / 'config.json'} is not readable JSON: {exc}") from exc
            if not isinstance(data, dict):
                raise UserInputError(f"{folder / 'config.json'} is not a JSON object")
            return data
    if Path(base_model).expanduser().exists() or base_model.startswith(("builtin/", ".", "/")) \
            or base_model.count("/") != 1:
        raise UserInputError(f"--base-model {base_model}: no config.json there (a folder holding the model's "
                             "config.json, or an HF id org/name)")
    try:
        from huggingface_hub import hf_hub_download

        path = hf_hub_download(base_model, "config.json")  # config.json only, never the weights
    except Exception as exc:  # offline, gated, unknown repo: all end the same way
        raise EnvironmentFailure(f"could not fetch config.json of {base_model} from the Hugging Face Hub "
                                 f"({type(exc).__name__}); pass a local folder holding its config.json") from exc
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise UserInputError(f"config.json of {base_model} on the Hub is not a JSON object")
    return data


def hardware_slots(plan: LaunchPlan, base_model: str, requested: str) -> dict[str, Any]:
    """``ftagent plan --hardware``: the slots FT_PARALLEL_TRIALS makes on the described GPUs, and auto's
    (``{"requested": SlotPlan JSON or {"requested": K, "refused": why}, "auto": ...}``; issue 41)."""
    from ftagent.core.errors import UserInputError
    from ftagent.tools.launch.slots import plan_gpu_slots

    config = _model_config(base_model)
    out: dict[str, Any] = {}
    for key, asked in (("requested", requested), ("auto", "auto")):
        try:
            out[key] = plan_gpu_slots(asked, plan.hardware, config, name=plan.model, cpu_ram_gb=plan.cpu_ram_gb,
                                      offload=plan.offload).model_dump(mode="json")
        except UserInputError as exc:
            out[key] = {"requested": asked, "refused": str(exc)}
    return out
