"""The scenario builder: everything known before loop 0 (DESIGN §4).

It produces a :class:`ftagent.core.types.ScenarioInfo`, which every component receives once. It runs
in three parts so that bad input never leaves a session behind:

* :meth:`FinetuneScenario.prepare` — base model (first), datasets and benchmark data: everything that can
  fail because of what the user asked for. It runs *before* the session directory exists.
* :meth:`FinetuneScenario.build` — LLaMA-Factory catalogue, dataset catalogue, GPU facts, memory
  estimate.
* :meth:`FinetuneScenario.baseline` — the base model on both splits, inside the session's time
  budget; its failure is one clear :class:`EnvironmentFailure`.

Every stage is a ``scenario_stage`` event; the result is stored in the session snapshot, so a
resume never re-runs it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ftagent.core.paths import llama_factory_info_dir
from ftagent.core.trace import Trace
from ftagent.core.types import EvalResult, ScenarioInfo, TimeLimits
from ftagent.engine.events import ConstantAnswer, Message, ScenarioStage

if TYPE_CHECKING:
    from ftagent.finetune.startup import ResolvedRun

Emit = Callable[[Any], None]


class Prepared:
    """What :meth:`FinetuneScenario.prepare` found: the selected datasets and the model folder."""

    def __init__(self, datasets: dict[str, Path], model_path: Path) -> None:
        self.datasets = datasets
        self.model_path = model_path


class FinetuneScenario:
    """Builds :class:`ScenarioInfo` in the order of DESIGN §4 (``FT_SCEN`` may name another class).

    ``run`` is the start-up's :class:`~ftagent.finetune.startup.ResolvedRun` (benchmark, model and its
    inference settings); without one the builder resolves ``settings`` itself when it first needs it.
    """

    def __init__(self, settings, runner, emit: Emit, *, run: ResolvedRun | None = None) -> None:
        self.settings = settings
        self.runner = runner
        self.emit = emit
        self._run = run
        self.selection_client = None  # the LLM client of the pre-session dataset selection, if any

    @property
    def run(self) -> ResolvedRun:
        """The resolved benchmark and model (given, or resolved from the settings once)."""
        if self._run is None:
            from ftagent.finetune.startup import resolve_run

            self._run = resolve_run(self.settings)
        return self._run

    def attach_session(self, session_dir: Path) -> None:
        """Write the pre-session LLM calls (dataset selection) into the session's records and budget."""
        if self.selection_client is not None:
            self.selection_client.records.attach(session_dir)

    def _stage(self, name: str, fn, **detail):
        self.emit(ScenarioStage(stage=name, status="start", detail=detail))
        try:
            result = fn()
        except Exception:
            self.emit(ScenarioStage(stage=name, status="failed", detail=detail))
            raise
        self.emit(ScenarioStage(stage=name, status="done", detail=detail))
        return result

    def prepare(self) -> Prepared:
        """Base model, datasets and benchmark data (UserInputError / EnvironmentFailure on bad input)."""
        from ftagent.datasets.prepare import prepare_datasets
        from ftagent.finetune.forecast import machine_load
        from ftagent.models.builtin import resolve_base_model
        from ftagent.tools.opencompass.runs import prepare_benchmark

        machine_load()  # sampled before this start-up's own work: the forecast's cache key (plan = session)
        ft = self.settings.ft
        file_path = Path(ft.file_path).absolute()
        file_path.mkdir(parents=True, exist_ok=True)
        token = _hf_token()
        # the base model first: a model that cannot be built or fetched stops the start before any
        # (possibly large) dataset download (issue 32.6)
        model_path = self._stage("model", lambda: resolve_base_model(ft.base_model, file_path, self.runner),
                                 base_model=ft.base_model)
        selection = self._select_datasets()
        prepared = self._stage("datasets", lambda: prepare_datasets(selection.datasets, file_path, token=token),
                               dataset=ft.dataset, selected=selection.datasets, selected_by=selection.source,
                               reason=selection.reason)
        self._stage("benchmark_data", lambda: prepare_benchmark(self.run.adapter, self.run.benchmarks_root,
                                                                ft.benchmark_limit), benchmark=ft.target_benchmark)
        self._check_user_datasets(list(prepared), file_path)
        return Prepared(prepared, Path(model_path))

    def _check_user_datasets(self, names: list[str], file_path: Path) -> None:
        """A user's own file (``--dataset ./my_data.jsonl``): scan it for benchmark items, say what was found."""
        from ftagent.datasets.registry import is_user_dataset
        from ftagent.finetune.startup import check_user_datasets

        users = [n for n in names if is_user_dataset(n)]
        if users:
            lines = self._stage("user_dataset_scan", lambda: check_user_datasets(
                users, self.run.benchmark, file_path, list(self.run.spec.input_columns)), datasets=users)
            for line in lines:
                self.emit(Message(text=line))

    def _select_datasets(self):
        """The rule, or the LLM planner where the rule cannot decide (:mod:`ftagent.planners.llm.select`)."""
        from ftagent.planners.llm.select import select_datasets

        ft, llm = self.settings.ft, self.settings.llm
        from ftagent.planners.registry import planner_spec, resolve_planner

        use_llm = planner_spec(resolve_planner(ft.planner, llm.configured)).selects_datasets  # a declared capability
        client = None
        if use_llm:
            from ftagent.llm.client import LLMClient

            # no session yet: the records wait in memory until attach_session() writes them
            client = self.selection_client = LLMClient(llm, ft, emit=self.emit)
        return select_datasets(ft.target_benchmark, ft.benchmark_description or "", dataset=ft.dataset,
                               client=client, related=list(self.run.spec.related_datasets))

    def build(self, prepared: Prepared) -> ScenarioInfo:
        """The catalogues, GPU facts and memory estimate on top of :meth:`prepare`'s result.

        Raises:
            EnvironmentFailure: a stage cannot run here.
        """
        from ftagent.core.hardware import detect_gpus
        from ftagent.core.paths import datasets_dir
        from ftagent.datasets.catalogue import build_catalogue
        from ftagent.models.describe import describe_model
        from ftagent.tools.llamafactory.catalogue import load_or_build_catalogue
        from ftagent.tools.opencompass.inference import eval_decoding, read_model_config

        ft, paths = self.settings.ft, self.settings.paths
        file_path = Path(ft.file_path).absolute()
        model_path = prepared.model_path
        spec = self.run.spec
        info_dir = llama_factory_info_dir(file_path)
        catalogue = self._stage("llama_factory_catalogue", lambda: load_or_build_catalogue(info_dir, self.runner))
        self._stage("dataset_catalogue", lambda: build_catalogue(datasets_dir(file_path), list(prepared.datasets),
                                                                 model_dir=model_path))
        model = describe_model(model_path, ft.base_model)
        if model.template is None and _is_chatml(model_path):
            model.template = "chatml"
        hardware = self._stage("hardware", detect_gpus)
        memory = self._stage("memory", lambda: _memory(model_path, hardware))
        if hardware.gpu_count:  # upstream's refusals before any GPU work (UserInputError: exit 2)
            self._stage("preflight", lambda: launch_preflight(model_path, hardware, ft.base_model,
                                                              self.run.model.inference))
        info = ScenarioInfo(
            benchmark=ft.target_benchmark, benchmark_description=ft.benchmark_description or "",
            user_target_scenario=ft.user_target_scenario, core_metric=spec.core_metric,
            direction=spec.direction, base_model=ft.base_model, base_model_path=str(model_path),
            model_info=model, datasets=sorted(prepared.datasets), dataset_root=str(datasets_dir(file_path)),
            hardware=hardware, memory=memory.model_dump(mode="json"), memory_report=memory.to_markdown(),
            llama_factory_info_dir=str(info_dir), llama_factory_version=catalogue.version,
            file_path=str(file_path), workspace_root=str(Path(paths.workspace_path).absolute()),
            upper_data_size_limit=ft.upper_data_size_limit,
            time_limits=TimeLimits(full_timeout=ft.full_timeout, data_processing_timeout=ft.data_processing_timeout,
                                   benchmark_timeout=ft.benchmark_timeout_s),
            parameter_catalogue=parameter_catalogue_text(catalogue, hardware.gpu_count > 0),
            force_think_token=ft.force_think_token,
            eval_decoding=eval_decoding(ft.base_model, hardware.gpu_count, spec.max_out_len,
                                        inference=self.run.model.inference,
                                        model_config=read_model_config(model_path)),
        )
        info.description_text = render_brief(info, self.run)  # again after the baseline (it shows the score)
        return info

    def baseline(self, info: ScenarioInfo, trace: Trace, timeout: Callable[[float], float]) -> None:
        """Evaluate the base model on both splits; fills ``info.baseline`` (validation) and ``trace``.

        Args:
            info: the scenario from :meth:`build`.
            trace: the session's trace (gets the core metric, direction and both baseline scores).
            timeout: caps the evaluation's own limit by what is left of the session budget.

        Raises:
            EnvironmentFailure: the baseline evaluation failed or gave no validation score.
        """
        trace.core_metric, trace.direction = info.core_metric, info.direction  # type: ignore[assignment]
        limit = timeout(self.settings.ft.benchmark_timeout_s)
        results = self._stage("baseline", lambda: self._baseline(info, limit))
        info.baseline = results["validation"]
        trace.baseline_val = results["validation"].score
        trace.baseline_test = results["test"].score
        trace.baseline_val_items = results["validation"].items_file  # paired intervals (ftagent.core.sota)
        trace.baseline_test_items = results["test"].items_file
        info.description_text = render_brief(info, self._run)

    def _baseline(self, info: ScenarioInfo, timeout: float) -> dict[str, EvalResult]:
        """Both splits of the base model (one OpenCompass run); a failure is one clear EnvironmentFailure."""
        from ftagent.finetune.workflow import benchmark_event, progress_events
        from ftagent.tools.opencompass.evaluator import evaluate_baseline

        run = self._run  # None: a caller with a scenario only (the evaluation looks the benchmark up)
        results = evaluate_baseline(info, self.settings, self.runner, timeout=timeout,
                                    on_progress=progress_events(self.emit),
                                    on_warning=lambda text: self.emit(Message(level="warning", text=text)),
                                    benchmark=run.adapter if run else None,
                                    inference=run.model.inference if run else None)
        for res in results.values():
            event = benchmark_event(res, baseline=True)
            event.constant_baseline = constant_answer(info, run.adapter if run else None, res.split)
            self.emit(event)
        return results


def constant_answer(info: ScenarioInfo, bench: Any, split: str) -> ConstantAnswer | None:
    """What the best constant answer scores on ``split`` (kept in eval_cache/, issue 31 item 7), recorded
    beside the base model's score for the report; None when it cannot be computed (no prepared split,
    a plug-in benchmark, a scorer that fails) — a fact for the reader, never a reason to fail the session."""
    from ftagent.benchmarks.baselines import stored_constant_baseline
    from ftagent.core.paths import benchmarks_dir, eval_cache_dir

    if not info.file_path:
        return None
    try:
        if bench is None:
            from ftagent.benchmarks import get_benchmark

            bench = get_benchmark(info.benchmark)
        base = stored_constant_baseline(bench, benchmarks_dir(info.file_path), eval_cache_dir(info.file_path),
                                        split)
    except Exception:  # noqa: BLE001 - see the docstring
        return None
    return base.facts() if base is not None else None


PARAMETER_CATALOGUE_TOKENS = 6000  # the config prompt's share of FT_PROMPT_TOKEN_BUDGET for the catalogue


def parameter_catalogue_text(catalogue, gpu: bool) -> str:
    """LLaMA-Factory's arguments as the config prompt shows them (essential ones first, token-bounded)."""
    from ftagent.llm.budget import count_tokens

    return catalogue.format_for_prompt(gpu=gpu, max_tokens=PARAMETER_CATALOGUE_TOKENS, count=count_tokens)


def render_brief(info: ScenarioInfo, run: ResolvedRun | None = None) -> str:
    """The scenario brief every LLM prompt quotes (:mod:`ftagent.planners.llm.brief`)."""
    from ftagent.planners.llm.brief import render_brief as render

    return render(info, benchmark=run.adapter if run is not None else None)


def _hf_token() -> str | None:
    for key in ("HF_TOKEN", "HUGGINGFACE_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        if os.environ.get(key):
            return os.environ[key]
    return None


def _is_chatml(model_path: Path) -> bool:
    cfg = Path(model_path) / "tokenizer_config.json"
    tpl = Path(model_path) / "chat_template.jinja"
    text = (cfg.read_text(encoding="utf-8") if cfg.is_file() else "") + (
        tpl.read_text(encoding="utf-8") if tpl.is_file() else "")
    return "<|im_start|>" in text


def launch_preflight(model_path: Path, hardware, name: str, inference=None):
    """The launch plan of the base model on the detected GPUs, refused (UserInputError) when upstream
    would refuse it (:mod:`ftagent.tools.launch.preflight`); None when config.json cannot be planned."""
    import psutil

    from ftagent.tools.launch.plan import launch_plan
    from ftagent.tools.launch.preflight import check_plan
    from ftagent.tools.launch.profiles import profile_of
    from ftagent.tools.opencompass.inference import read_model_config

    cfg = read_model_config(model_path)
    try:
        plan = launch_plan(cfg, profile_of(hardware), name=name, inference=inference.values if inference else None,
                           cpu_ram_gb=psutil.virtual_memory().total / 1e9)
    except (KeyError, TypeError):
        return None  # no usable config.json (the memory stage already guessed from the name)
    check_plan(plan)
    return plan


def _memory(model_path: Path, hardware):
    from ftagent.tools.llamafactory.memory import estimate_for_hardware

    return estimate_for_hardware(model_path, hardware)

