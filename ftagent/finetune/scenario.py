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
from typing import TYPE_CHECKING, Any, TypeVar

from ftagent.core.holdout import Holdout
from ftagent.core.paths import llama_factory_info_dir
from ftagent.core.trace import Trace
from ftagent.core.types import EvalResult, ScenarioInfo, TimeLimits
from ftagent.engine.events import ConstantAnswer, Message, ScenarioStage

if TYPE_CHECKING:
    from ftagent.benchmarks.base import BenchmarkAdapter
    from ftagent.core.hardware import HardwareInfo
    from ftagent.core.settings import Settings
    from ftagent.finetune.resolve import ResolvedRun
    from ftagent.llm.client import LLMClient
    from ftagent.planners.llm.select import Selection
    from ftagent.runners.base import Runner
    from ftagent.tools.llamafactory.catalogue import LFCatalogue
    from ftagent.tools.llamafactory.memory import MemoryReport

Emit = Callable[[Any], None]
_T = TypeVar("_T")


class Prepared:
    """What :meth:`FinetuneScenario.prepare` found: the selected datasets, the model folder and the session's
    frozen copy of its benchmark items (``(root, digest)``, :mod:`ftagent.benchmarks.frozen`)."""

    def __init__(self, datasets: dict[str, Path], model_path: Path, benchmark_copy: tuple[Path, str]) -> None:
        self.datasets = datasets
        self.model_path = model_path
        self.benchmark_copy = benchmark_copy
        self.holdout: Holdout | None = None  # validation's feedback and selection parts (issue 39 item 5)


class FinetuneScenario:
    """Builds :class:`ScenarioInfo` in the order of DESIGN §4 (``FT_SCEN`` may name another class).

    ``run`` is the start-up's :class:`~ftagent.finetune.resolve.ResolvedRun`: the benchmark, the base
    model (name, folder, inference settings), the dataset choice, the description and the planner are
    read from it alone (``settings`` gives the limits, paths and timeouts). A plug-in ``FT_SCEN`` is
    built the same way: ``Cls(settings, runner, emit, run=run)``.
    """

    def __init__(self, settings: Settings, runner: Runner, emit: Emit, *, run: ResolvedRun) -> None:
        self.settings = settings
        self.runner = runner
        self.emit = emit
        self.run = run
        self.selection_client: LLMClient | None = None  # the LLM client of the pre-session dataset selection, if any

    def attach_session(self, session_dir: Path) -> None:
        """Write the pre-session LLM calls (dataset selection) into the session's records and budget."""
        if self.selection_client is not None:
            self.selection_client.records.attach(session_dir)

    def _stage(self, name: str, fn: Callable[[], _T], **detail: Any) -> _T:
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
        from ftagent.benchmarks.prepared import prepare_session_copy
        from ftagent.datasets.prepare import prepare_datasets
        from ftagent.finetune.probe_cache import machine_load
        from ftagent.models.base_model import fetch_base_model

        machine_load()  # sampled before this start-up's own work: the forecast's cache key (plan = session)
        ft = self.settings.ft
        file_path = Path(ft.file_path).absolute()
        file_path.mkdir(parents=True, exist_ok=True)
        token = _hf_token()
        # the base model first: a model that cannot be built or fetched stops the start before any
        # (possibly large) dataset download (issue 32.6)
        model = self.run.model  # its folder computed once, by start-up
        model_path = self._stage("model", lambda: fetch_base_model(model.name, model.path, self.runner, file_path),
                                 base_model=model.name)
        selection = self._select_datasets()
        prepared = self._stage("datasets", lambda: prepare_datasets(selection.datasets, file_path, token=token),
                               dataset=self.run.dataset, selected=selection.datasets, selected_by=selection.source,
                               reason=selection.reason)
        copy = self._stage("benchmark_data", lambda: prepare_session_copy(
            self.run.adapter, self.run.benchmarks_root, ft.benchmark_limit, self.run.checked_items),
            benchmark=self.run.benchmark)
        self._check_user_datasets(list(prepared), file_path)
        out = Prepared(prepared, Path(model_path), copy)
        out.holdout = validation_holdout(self.run.adapter, copy[0], seed=ft.holdout_seed, share=ft.selection_share)
        return out

    def _check_user_datasets(self, names: list[str], file_path: Path) -> None:
        """A user's own file (``--dataset ./my_data.jsonl``): scan it for benchmark items, say what was found."""
        from ftagent.datasets.choice import check_user_datasets
        from ftagent.datasets.registry import is_user_dataset

        users = [n for n in names if is_user_dataset(n)]
        if users:
            lines = self._stage("user_dataset_scan", lambda: check_user_datasets(
                users, self.run.benchmark, file_path, list(self.run.spec.input_columns),
                self.run.spec.output_column), datasets=users)
            for line in lines:
                self.emit(Message(text=line))

    def _select_datasets(self) -> Selection:
        """The rule, or the LLM planner where the rule cannot decide (:mod:`ftagent.planners.llm.select`)."""
        from ftagent.planners.llm.select import select_datasets
        from ftagent.planners.registry import planner_spec

        ft, llm, run = self.settings.ft, self.settings.llm, self.run
        use_llm = planner_spec(run.planner).selects_datasets  # a declared capability
        client = None
        if use_llm:
            from ftagent.llm.client import LLMClient

            # no session yet: the records wait in memory until attach_session() writes them
            client = self.selection_client = LLMClient(llm, ft, emit=self.emit)
        return select_datasets(run.benchmark, run.description, dataset=run.dataset, client=client,
                               related=list(run.spec.related_datasets))

    def build(self, prepared: Prepared) -> ScenarioInfo:
        """The catalogues, GPU facts and memory estimate on top of :meth:`prepare`'s result.

        Raises:
            EnvironmentFailure: a stage cannot run here.
        """
        from ftagent.core.hardware import detect_gpus
        from ftagent.core.paths import datasets_dir
        from ftagent.datasets.catalogue import build_catalogue
        from ftagent.finetune.hardware_plan import host_ram_gb, session_plan
        from ftagent.models.describe import describe_model
        from ftagent.tools.launch.preflight import check_plan
        from ftagent.tools.launch.profiles import profile_of
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
        base_model = self.run.model.name
        model = describe_model(model_path, base_model)
        if model.template is None and _is_chatml(model_path):
            model.template = "chatml"
        hardware = self._stage("hardware", detect_gpus)
        gpus = profile_of(hardware)
        ram_gb = host_ram_gb()
        plan = self._stage("memory", lambda: session_plan(
            model_path, hardware, name=base_model, inference=self.run.model.inference, cpu_ram_gb=ram_gb,
            settings=self.settings))
        memory = plan.memory if plan else _memory(model_path, hardware, ram_gb, self.settings)
        if hardware.gpu_count and plan:  # upstream's refusals before any GPU work (UserInputError: exit 2)
            self._stage("preflight", lambda: check_plan(plan))
        info = ScenarioInfo(
            benchmark=self.run.benchmark, benchmark_description=self.run.description,
            user_target_scenario=ft.user_target_scenario, core_metric=spec.core_metric,
            direction=spec.direction, base_model=base_model, base_model_path=str(model_path),
            model_info=model, datasets=sorted(prepared.datasets), dataset_root=str(datasets_dir(file_path)),
            hardware=hardware, memory=memory.model_dump(mode="json"),
            memory_report=memory_markdown(memory, model_path, hardware, list(ft.stages)),  # + per stage (issue 40)
            launch_plan=plan.model_dump(mode="json") if plan else {},
            llama_factory_info_dir=str(info_dir), llama_factory_version=catalogue.version,
            file_path=str(file_path), workspace_root=str(Path(paths.workspace_path).absolute()),
            upper_data_size_limit=ft.upper_data_size_limit,
            time_limits=TimeLimits(full_timeout=ft.full_timeout, data_processing_timeout=ft.data_processing_timeout,
                                   benchmark_timeout=ft.benchmark_timeout_s),
            parameter_catalogue=parameter_catalogue_text(catalogue, hardware.gpu_count > 0),
            force_think_token=ft.force_think_token,
            benchmark_root=str(prepared.benchmark_copy[0]), benchmark_digest=prepared.benchmark_copy[1],
            holdout=prepared.holdout,
            eval_decoding=eval_decoding(base_model, hardware.gpu_count, spec.max_out_len,
                                        inference=self.run.model.inference,
                                        model_config=read_model_config(model_path),
                                        per_gpu_memory_gb=gpus.memory_gb, gpu_name=gpus.gpu_name,
                                        compute_capability=gpus.compute_capability if gpus.gpu_count else None),
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
        trace.holdout = info.holdout
        if info.holdout is not None:  # the one run's items, split by id (issue 39 item 5)
            from ftagent.core.holdout import split_record

            trace.baseline_parts = split_record(results["validation"].items_file, info.holdout)
            note = info.holdout.size_note()
            self.emit(Message(level="warning" if note else "info",
                              text=info.holdout.line() + (f" ({note})" if note else "")))
        # what each split was scored with: the integrity guard's eval_config reference (ftagent.integrity.eval_config)
        trace.baseline_eval_configs = {s: r.config_sha256 for s, r in results.items() if r.config_sha256}
        info.description_text = render_brief(info, self.run)

    def _baseline(self, info: ScenarioInfo, timeout: float) -> dict[str, EvalResult]:
        """Both splits of the base model (one OpenCompass run); a failure is one clear EnvironmentFailure."""
        from ftagent.finetune.loop_record import benchmark_event, progress_events
        from ftagent.tools.opencompass.evaluator import evaluate_baseline

        run = self.run
        results = evaluate_baseline(info, self.settings, self.runner, timeout=timeout,
                                    on_progress=progress_events(self.emit),
                                    on_warning=lambda text: self.emit(Message(level="warning", text=text)),
                                    benchmark=run.adapter, inference=run.model.inference)
        for res in results.values():
            event = benchmark_event(res, baseline=True)
            event.constant_baseline = constant_answer(info, run.adapter, res.split, runner=self.runner)
            self.emit(event)
        return results


def validation_holdout(bench: BenchmarkAdapter, root: Path, *, seed: int, share: float) -> Holdout:
    """The session's split of its validation items (:func:`ftagent.core.holdout.split_holdout`), per OpenCompass
    dataset of the frozen copy at ``root`` (the names and row indices OpenCompass reports items by)."""
    from ftagent.core.holdout import split_holdout

    sizes, files = {}, {}
    folder = Path(root) / bench.spec.key
    for block in bench.dataset_blocks(Path(root), "validation"):
        path = Path(block.path)
        with path.open(encoding="utf-8") as fh:
            sizes[block.abbr] = sum(1 for line in fh if line.strip())
        files[block.abbr] = str(path.resolve().relative_to(folder.resolve()))
    return split_holdout(sizes, seed=seed, share=share, files=files)


def constant_answer(info: ScenarioInfo, bench: BenchmarkAdapter, split: str, *, runner: Runner | None = None
                    ) -> ConstantAnswer | None:
    """What the constant answer scores on ``split`` (kept in eval_cache/, issue 31 item 7), chosen on validation's
    feedback part (issue 43), recorded beside the base model's score for the report; a code benchmark's
    always-equal program runs in the tool env through ``runner``. None when it cannot be computed (no prepared
    split, a plug-in benchmark, a scorer that fails) — a fact for the reader, never a reason to fail the session."""
    from ftagent.benchmarks.baselines import stored_constant_baseline
    from ftagent.core.paths import eval_cache_dir
    from ftagent.tools.opencompass.constant_program import program_scorer

    if not info.file_path:
        return None
    cache = eval_cache_dir(info.file_path)
    try:
        base = stored_constant_baseline(bench, info.items_root(), cache, split, holdout=info.holdout,
                                        program_score=program_scorer(runner, cache / "constant_program")
                                        if runner is not None else None)
    except Exception:  # noqa: BLE001 - see the docstring
        return None
    return base.facts() if base is not None else None


PARAMETER_CATALOGUE_TOKENS = 6000  # the config prompt's share of FT_PROMPT_TOKEN_BUDGET for the catalogue


def parameter_catalogue_text(catalogue: LFCatalogue, gpu: bool) -> str:
    """LLaMA-Factory's arguments as the config prompt shows them (essential ones first, token-bounded)."""
    from ftagent.llm.budget import count_tokens
    from ftagent.tools.llamafactory.config import managed_keys

    return catalogue.format_for_prompt(gpu=gpu, managed=[str(k) for k in managed_keys(gpu=gpu)],
                                       max_tokens=PARAMETER_CATALOGUE_TOKENS, count=count_tokens)


def render_brief(info: ScenarioInfo, run: ResolvedRun) -> str:
    """The scenario brief every LLM prompt quotes (:mod:`ftagent.planners.llm.brief`)."""
    from ftagent.planners.llm.brief import render_brief as render

    return render(info, benchmark=run.adapter)


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


def memory_markdown(memory: MemoryReport, model_path: Path, hardware: HardwareInfo, stages: list[str]) -> str:
    """The memory table of the prompts: the SFT methods, then each enabled stage (``stage_memory``)."""
    from ftagent.finetune.stage_prepare import stage_memory_markdown

    return memory.to_markdown() + stage_memory_markdown(model_path, memory, stages)


def _memory(model_path: Path, hardware: HardwareInfo, ram_gb: float, settings: Settings) -> MemoryReport:
    """The estimate without a plannable config.json (the size from the model's name)."""
    from ftagent.finetune.hardware_plan import offload_of
    from ftagent.tools.llamafactory.memory import estimate_for_hardware

    offload = offload_of(settings)
    return estimate_for_hardware(model_path, hardware, cpu_ram_gb=ram_gb, offload_allowed=offload.allowed,
                                 cpu_adam=offload.cpu_adam)

