"""The resolved facts of a run: :func:`resolve_run` checks a command's options, :class:`ResolvedRun` holds
what they resolved to.

The benchmark (key or YAML file → registry key and the benchmark itself), the base model (name, folder,
its models.yaml inference settings), the dataset choice, the benchmark description and the planner
(``FT_PLANNER`` against the planner registry) are resolved here, in one order, and nowhere else: bad input
raises :class:`UserInputError` (exit 2) before anything is written, and ``settings.ft`` is only read (it
keeps what the user gave). Every command reaches this through the one start-up sequence,
:func:`ftagent.finetune.start.start` (``llm_finetune``, ``demo``, ``plan``, ``prompts``, ``eval``, and
``job``'s task check, :func:`ftagent.finetune.start.resolve_tasks`).

:func:`resolve_run` reads as its steps, top to bottom, each one call down into the room that owns the fact
and back with a typed value: the benchmark (``open_benchmark``, its rows' ``check_data``), the planner
(:func:`ftagent.planners.registry.resolve_planner`), the base model
(:func:`ftagent.models.base_model.check_base_model`), the dataset choice
(:func:`ftagent.datasets.choice.choose_dataset`: the users' earlier copies registered, a file checked, copied
and scanned against the items known before anything is written), the training source (here: the planner's
and the datasets' facts together), the model's folder and inference settings (here).

The scenario, the evaluator, the data step, the integrity guard and the brief take what they need from the
:class:`ResolvedRun` as required parameters, so a session looks its benchmark up once in the registry and
reads models.yaml once (``tests/unit/test_startup_lookups.py`` keeps both).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, InstanceOf

from ftagent.benchmarks.base import BenchmarkAdapter, BenchmarkSpec
from ftagent.benchmarks.checked import CheckedItems
from ftagent.core.errors import UserInputError
from ftagent.tools.opencompass.inference import InferenceSettings

if TYPE_CHECKING:
    from ftagent.core.settings import Settings


class ResolvedModel(BaseModel):
    """The base model as start-up resolved it."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="--base-model as given: builtin/<name>, a local folder or an HF repo id")
    path: Path = Field(description="its folder (the scenario's model stage builds or downloads it there)")
    inference: InferenceSettings = Field(description="its evaluation settings from models.yaml (read once)")


class ResolvedRun(BaseModel):
    """What the options resolved to: the only holder of these facts (``settings.ft`` keeps what the user
    gave; nothing downstream of start-up reads its benchmark, base model, dataset or description).

    ``benchmark`` stays the registry key (a string, what events, reports and the snapshot record);
    ``adapter`` is the benchmark itself (``.spec``, ``prepare``, ``dataset_blocks``) and ``model`` the base
    model with its folder and inference settings. Components get these values, never the key to look up again.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    benchmark: str = Field(description="the registry key (a YAML file is registered under its `name`)")
    benchmark_file: str | None = Field(None, description="the user YAML file behind the key, kept for --path")
    adapter: BenchmarkAdapter = Field(exclude=True, description="the benchmark: spec, data preparation, blocks")
    data_dir: Path = Field(description="its prepared data: FT_FILE_PATH/benchmarks/<key>")
    checked_items: InstanceOf[CheckedItems] | None = Field(
        None, exclude=True, description="a local-file benchmark's items as start-up read and checked them: the "
        "benchmark_data stage prepares these (the files are read once); None: none were read (a download, a resume)")
    model: ResolvedModel
    dataset: str | None = Field(None, description="a registered name or 'all' (a user file: its copy's name)")
    dataset_file: str | None = Field(None, description="the user's own file behind `dataset`, kept for the record")
    description: str = Field("", description="--benchmark-description, else the benchmark's own description")
    planner: str = Field(description="the planner's registry name (FT_PLANNER resolved: `auto` never stays)")

    @property
    def base_model(self) -> str:
        """``--base-model`` as given (``model.name``)."""
        return self.model.name

    @property
    def spec(self) -> BenchmarkSpec:
        """The benchmark's static facts (core metric, direction, columns, related datasets ...)."""
        return self.adapter.spec

    @property
    def benchmarks_root(self) -> Path:
        """``FT_FILE_PATH/benchmarks``: the folder every benchmark's data is prepared under."""
        return self.data_dir.parent


def benchmark_file(key: str) -> str | None:
    """The user YAML file behind ``key`` (None for built-in and plug-in benchmarks): kept for ``--path``."""
    from ftagent.benchmarks.registry import BENCHMARKS

    path = BENCHMARKS.source_file(key)
    return str(path) if path is not None and key not in BENCHMARKS.builtin_files() else None


def check_training_source(planner: str, dataset: str | None, benchmark: str, related: list[str]) -> None:
    """A session needs something to train on (issue 34.9): a ``--dataset`` or the benchmark's related
    datasets; without both only a planner that declares ``selects_datasets`` or ``generates_data`` (the
    LLM planner: its dataset selection looks through every registered dataset, and its data script may
    generate the rows) can go on. The heuristic planner's data script only converts the selected
    datasets: it would write 0 rows in every code round.

    Raises:
        UserInputError: no training source and a planner that can find none itself.
    """
    from ftagent.datasets.registry import resolve_dataset_choice
    from ftagent.planners.registry import planner_spec

    spec = planner_spec(planner)
    if resolve_dataset_choice(dataset, benchmark, related) or spec.selects_datasets or spec.generates_data:
        return
    raise UserInputError(
        f"benchmark '{benchmark}' has no training data: no --dataset and no related_datasets. Add --dataset "
        "(a registered name from `ftagent datasets list`, 'all', or your own file ./my_data.jsonl), or "
        "related_datasets: [...] to the benchmark YAML; or use the LLM planner (CHAT_MODEL and "
        "OPENAI_API_KEY), which selects datasets itself and whose data script can generate rows")


def resolved_model(name: str, file_path: Path) -> ResolvedModel:
    """A checked ``--base-model`` value as :class:`ResolvedModel`: its folder (computed, not built or downloaded)
    and its models.yaml inference settings (read once). ``ftagent eval --against`` resolves its second model here."""
    from ftagent.models.base_model import base_model_dir
    from ftagent.tools.opencompass.inference import inference_settings

    return ResolvedModel(name=name, path=base_model_dir(name, file_path), inference=inference_settings(name))


def resolve_run(settings: Settings, *, planner: str | None = None, check_datasets: bool = True,
                check_data: bool | None = None, fetchable: bool = True) -> ResolvedRun:
    """Check and resolve the benchmark, base model, dataset choice and planner of ``settings``.

    The one registry lookup of the benchmark and the one read of models.yaml of a session: the result
    goes to the scenario and the components (:func:`ftagent.finetune.components.build_components`).
    ``settings`` is only read: the resolved values live in the returned :class:`ResolvedRun` alone
    (``tests/unit/test_startup_single_source.py``). A resumed session calls it again with its snapshot's
    benchmark (file) and base model.

    Args:
        settings: the loaded settings (``ft.target_benchmark``: a key or a YAML file; ``ft.dataset``,
            ``ft.base_model``, ``ft.benchmark_description``, ``ft.planner`` as the user gave them).
        planner: a planner name that replaces ``FT_PLANNER`` (``ftagent prompts``: ``heuristic``, so
            that nothing is asked of an LLM); resolved against the planner registry either way.
        check_datasets: check ``--dataset`` (a resumed session keeps the choice it was started with).
        check_data: read and check every row of a benchmark with local data files, writing nothing
            (default: as ``check_datasets``; a resumed session uses its prepared copy).
        fetchable: an HF id must be obtainable from here (offline: already downloaded). A job's task check
            passes False: its tasks may run elsewhere (Ray) and each session checks it at its own start.

    Raises:
        UserInputError: no or unknown benchmark, bad benchmark file, no or bad base model, unknown dataset
            or a bad dataset file, unknown planner.
    """
    from ftagent.benchmarks import open_benchmark
    from ftagent.benchmarks.checked import ChecksData
    from ftagent.core.paths import benchmark_data_dir
    from ftagent.datasets.choice import choose_dataset
    from ftagent.models.base_model import check_base_model
    from ftagent.planners.registry import resolve_planner

    ft = settings.ft
    if not ft.target_benchmark:
        raise UserInputError(
            "no benchmark: pass --benchmark KEY (see `ftagent benchmarks list`). ftagent needs a benchmark "
            "to measure progress; --user-target-scenario only adds a free-text goal to the prompts"
        )
    key, adapter = open_benchmark(ft.target_benchmark)
    file_path = Path(ft.file_path or ".").absolute()
    chosen_planner = resolve_planner(planner or ft.planner, settings.llm.configured)
    items = None
    if (check_datasets if check_data is None else check_data) and isinstance(adapter, ChecksData):
        # the benchmark's rows before anything is written: a bad row is exit 2, not a failed baseline
        items = adapter.check_data(benchmark_data_dir(file_path, key).parent, ft.benchmark_limit)
    base_model = check_base_model(ft.base_model, ft.file_path, fetchable=fetchable)
    dataset = choose_dataset(ft.dataset, adapter.spec, file_path, check=check_datasets, checked=items,
                             limit=ft.benchmark_limit)
    if check_datasets:
        check_training_source(chosen_planner, dataset.name, key, list(adapter.spec.related_datasets))
    return ResolvedRun(benchmark=key, benchmark_file=benchmark_file(key), adapter=adapter,
                       data_dir=benchmark_data_dir(file_path, key), checked_items=items,
                       model=resolved_model(base_model, file_path), dataset=dataset.name, dataset_file=dataset.file,
                       description=ft.benchmark_description or adapter.spec.description, planner=chosen_planner)
