"""The resolved facts of a run: :func:`resolve_run` checks a command's options, :class:`ResolvedRun` holds
what they resolved to.

The benchmark (key or YAML file → registry key and the benchmark itself), the base model (name, folder,
its models.yaml inference settings), the dataset choice, the benchmark description and the planner
(``FT_PLANNER`` against the planner registry) are resolved here, in one order, and nowhere else: bad input
raises :class:`UserInputError` (exit 2) before anything is written, and ``settings.ft`` is only read (it
keeps what the user gave). Every command reaches this through the one start-up sequence,
:func:`ftagent.finetune.start.start` (``llm_finetune``, ``demo``, ``plan``, ``prompts``, ``eval``, and
``job``'s task check, :func:`ftagent.finetune.start.resolve_tasks`).

The scenario, the evaluator, the data step, the integrity guard and the brief take what they need from the
:class:`ResolvedRun` as required parameters, so a session looks its benchmark up once in the registry and
reads models.yaml once (``tests/unit/test_startup_lookups.py`` keeps both).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

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


def check_base_model(name: str | None, file_path: Path | None = None, *, fetchable: bool = True) -> str:
    """A base model must be given, and be builtin/<name>, a local folder or an HF repo id; with
    ``fetchable`` one that can be had here (offline: already under ``FT_FILE_PATH/models``). Returns it."""
    if not name or not name.strip():
        raise UserInputError(
            "no base model: pass --base-model (e.g. builtin/tiny-qwen2 or Qwen/Qwen2.5-7B-Instruct) "
            "or set FT_BASE_MODEL"
        )
    from ftagent.models.base_model import check_model_name
    from ftagent.models.download import offline_unfetchable

    check_model_name(name, file_path)
    why = offline_unfetchable(name, file_path) if fetchable else None
    if why:  # found before any dataset is prepared or downloaded, and before a session exists
        raise UserInputError(why)
    return name


def check_dataset(choice: str | None, benchmark: str, file_path: Path | None, related: list[str],
                  items: dict[str, Any] | None = None, answers: dict[str, str] | None = None) -> str | None:
    """``--dataset`` must be a registered dataset name, ``all`` or a data file; returns the name to use.

    A file (``./my_data.jsonl``, ``.json``, ``.csv``, ``.parquet``) is checked, copied under
    ``FT_FILE_PATH/datasets/`` and registered (:mod:`ftagent.datasets.user_file`): its copy's name is
    returned. Raises UserInputError for an unknown name or a bad file (nothing is copied then).
    ``related``: the benchmark spec's ``related_datasets``.
    ``items``: the benchmark's validation and test items when they are known before anything is written
    (a local-file benchmark): a file holding one is refused before it is copied (issue 34.12); ``answers``
    their gold answers (the scan's numeric match).
    """
    from ftagent.datasets.registry import dataset_names, resolve_dataset_choice
    from ftagent.datasets.user_file.reading import looks_like_file
    from ftagent.datasets.user_file.register import register_user_file

    if choice is not None and looks_like_file(choice):
        from ftagent.core.paths import datasets_dir

        root = datasets_dir(Path(file_path or ".").absolute())
        return register_user_file(Path(choice), root, reserved=set(dataset_names()), items=items,
                                  answers=answers or {}).name
    resolve_dataset_choice(choice, benchmark, related)
    return choice


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


def register_user_datasets(file_path: Path | None) -> list[str]:
    """Register the copies of users' files under ``FT_FILE_PATH/datasets`` (a resumed session's among them)."""
    from ftagent.core.paths import datasets_dir
    from ftagent.datasets.user_file.register import register_existing

    return register_existing(datasets_dir(Path(file_path or ".").absolute()))


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
    goes to the scenario and the components (:func:`ftagent.finetune.workflow.build_components`).
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
    register_user_datasets(ft.file_path)  # a resumed session may train on a user file's copy
    dataset, dataset_file = ft.dataset, None
    related = list(adapter.spec.related_datasets)
    if check_datasets:
        from ftagent.datasets.user_file.reading import looks_like_file

        scan = (_items_in_memory(key, items, list(adapter.spec.input_columns), file_path, ft.benchmark_limit)
                if looks_like_file(dataset) else None)
        answers = (_answers_in_memory(key, items, adapter.spec.output_column, file_path)
                   if scan is not None else None)
        name = check_dataset(dataset, key, ft.file_path, related=related, items=scan, answers=answers)
        if dataset is not None and name != dataset:  # a file: the session goes on with its registered copy
            dataset_file, dataset = str(Path(dataset).expanduser().absolute()), name
        check_training_source(chosen_planner, dataset, key, related)
    model = resolved_model(base_model, file_path)
    return ResolvedRun(benchmark=key, benchmark_file=benchmark_file(key), adapter=adapter,
                       data_dir=benchmark_data_dir(file_path, key), checked_items=items, model=model, dataset=dataset,
                       dataset_file=dataset_file, description=ft.benchmark_description or adapter.spec.description,
                       planner=chosen_planner)


def _items_in_memory(benchmark: str, checked: CheckedItems | None, input_columns: list[str],
                     file_path: Path, limit: int | None) -> dict[str, list[str]] | None:
    """The contamination scan's items, read without writing (issue 34.12): a contaminated ``--dataset``
    file is refused before it is copied, the model is built or anything is prepared.

    A local-file benchmark's come from ``checked`` (its rows, read by ``check_data``), keyed as the scan after
    preparing keys them (the merged ``<key>/<split>.jsonl``); another's from its prepared folder when that
    is current for ``limit``. None when it is not prepared yet: its items exist only once it is downloaded
    or generated, and the scenario scans the file then (after the model and data sets are prepared).
    """
    from ftagent.benchmarks.prepared import is_prepared
    from ftagent.core.paths import benchmark_data_dir
    from ftagent.tools.llamafactory.data_script import benchmark_items_for, keyed_items

    if checked is not None:
        return {k: v for split in ("validation", "test")
                for k, v in keyed_items(benchmark, split, checked.split(split), input_columns).items()}
    if is_prepared(benchmark_data_dir(file_path, benchmark).parent, benchmark, limit):
        return benchmark_items_for(benchmark, file_path, input_columns)
    return None


def _answers_in_memory(benchmark: str, checked: CheckedItems | None, answer_column: str,
                       file_path: Path) -> dict[str, str]:
    """The gold answers of :func:`_items_in_memory`'s items, keyed the same (the scan's numeric match)."""
    from ftagent.benchmarks.frozen import keyed_answers, scan_answers
    from ftagent.core.paths import benchmark_data_dir

    if checked is not None:
        return {k: v for split in ("validation", "test")
                for k, v in keyed_answers(benchmark, split, checked.split(split), answer_column).items()}
    return scan_answers(benchmark_data_dir(file_path, benchmark), answer_column)


def check_user_datasets(names: list[str], benchmark: str, file_path: Path, input_columns: list[str],
                        answer_column: str) -> list[str]:
    """Scan the user files among ``names`` against the benchmark's validation and test items.

    Runs once the benchmark data is prepared, still before the session exists. Returns one line per
    user file (the detected format, rows, where the copy is) for the session's events.
    ``input_columns``, ``answer_column``: the resolved spec's.

    Raises:
        UserInputError: a file holds benchmark items (how many, the first row index and item id).
    """
    from ftagent.benchmarks.frozen import scan_answers
    from ftagent.core.paths import benchmark_data_dir
    from ftagent.datasets.prepare import dataset_dir
    from ftagent.datasets.registry import is_user_dataset
    from ftagent.datasets.user_file.info import read_info
    from ftagent.datasets.user_file.register import check_against_benchmark
    from ftagent.tools.llamafactory.data_script import benchmark_items_for

    lines: list[str] = []
    items: dict[str, list[str]] | None = None
    answers: dict[str, str] = {}
    for name in names:
        info = read_info(dataset_dir(name, file_path)) if is_user_dataset(name) else None
        if info is None:
            continue
        if items is None:  # read once, when some file is a user's
            items = benchmark_items_for(benchmark, file_path, input_columns)
            answers = scan_answers(benchmark_data_dir(file_path, benchmark), answer_column)
        check_against_benchmark(info, dataset_dir(name, file_path), items, answers)
        lines.append(info.describe())
    return lines
