"""One benchmark = a :class:`~ftagent.benchmarks.schema.BenchmarkConfig` + the components it names.

:class:`Benchmark` composes a loader, an optional row transform, a prompt builder, a metric and an
extractor (all looked up by name in :mod:`ftagent.benchmarks.components`); there is no adapter class
per benchmark. It satisfies :class:`~ftagent.benchmarks.base.BenchmarkAdapter`: it prepares
``<root>/<key>/{validation,test}.jsonl`` (and ``<split>/<subset>.jsonl``), reads items back and
renders the OpenCompass dataset blocks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ftagent.benchmarks.base import (
    PREPARED_SPLITS,
    SOURCE_KEY,
    BenchmarkSpec,
    DatasetBlock,
    Split,
    read_jsonl,
    write_jsonl,
)
from ftagent.benchmarks.checked import CheckedItems
from ftagent.benchmarks.components import (
    BASE_EVALUATOR_KWARGS,
    EXTRACTORS,
    ITEMS,
    LOADERS,
    METRICS,
    ROUNDS,
    ExtractorDef,
    MetricDef,
)
from ftagent.benchmarks.schema import BenchmarkConfig
from ftagent.core.errors import UserInputError
from ftagent.core.registry import did_you_mean, load_object


def _lookup(config: BenchmarkConfig, registry, name: str, field: str):
    try:
        return registry.get(name)
    except UserInputError as exc:
        where = f"benchmark file {config.source_file}" if config.source_file else f"benchmark '{config.name}'"
        raise UserInputError(f"{where}: `{field}`: {exc}") from exc


def _kwargs_text(kwargs: dict[str, Any]) -> str:
    return f"({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})" if kwargs else ""


class Benchmark:
    """A benchmark built from its YAML file (composition of registered components)."""

    def __init__(self, config: BenchmarkConfig) -> None:
        self.config = config
        self.metric: MetricDef = _lookup(config, METRICS, config.metric, "metric")
        name = config.extractor or self.metric.extractor or "none"
        self.extractor: ExtractorDef = _lookup(config, EXTRACTORS, name, "extractor")
        self._loader = _lookup(config, LOADERS, config.data.loader, "data.loader")
        self._item = _lookup(config, ITEMS, config.data.item, "data.item") if config.data.item else None
        self._rounds = _lookup(config, ROUNDS, config.rounds, "rounds")
        self._check_metric_kwargs()
        self.spec = self._spec()

    def _check_metric_kwargs(self) -> None:
        """A ``metric_kwargs`` key the metric's evaluator does not take is an error now, not in OpenCompass."""
        accepts = self.metric.accepts
        if accepts is None:  # a plug-in metric that declares nothing: OpenCompass is the judge
            return
        valid = [*accepts, *BASE_EVALUATOR_KWARGS]
        for key in self.config.metric_kwargs:
            if key not in valid:
                takes = ", ".join(accepts) if accepts else "no metric_kwargs"
                raise UserInputError(f"{self._where()}: `metric_kwargs`: metric '{self.config.metric}' takes no "
                                     f"'{key}'.{did_you_mean(str(key), valid)} It takes: {takes}")

    # --- facts ----------------------------------------------------------------------------------
    def _spec(self) -> BenchmarkSpec:
        cfg, data = self.config, self.config.data
        source = data.source or (f"hf:{data.repo}" if data.repo else None)
        if source is None:
            files: list[str | None] = [data.file] if data.file else [data.validation, data.test]
            source = "local: " + ", ".join(str(cfg.resolve(f)) for f in files if f)
        evaluator = self.metric.evaluator + _kwargs_text(self.metric.kwargs | cfg.metric_kwargs)
        if cfg.subset_metrics:
            notes = ", ".join(f"{s}: {m}" for s, m in cfg.subset_metrics.items())
            headline = "; headline = mean of these" if cfg.core_metric == "mean_core" else ""
            evaluator += f" (core per sub-task: {notes}{headline})"
        if cfg.evaluator_note:
            evaluator += f" {cfg.evaluator_note}"
        return BenchmarkSpec(
            key=cfg.name, category=cfg.category, description=cfg.description.strip(), data_source=source,
            related_datasets=list(cfg.related_datasets), prompt=cfg.prompt_note or cfg.prompt,
            answer_rule=cfg.answer_rule or f"{self.extractor.rule}; {self.metric.rule}", evaluator=evaluator,
            core_metric=cfg.core_metric or self.metric.core_metric, direction=cfg.direction,
            max_out_len=cfg.max_out_len, input_columns=cfg.columns(), output_column="answer",
            subsets=list(cfg.subsets),
        )

    @property
    def key(self) -> str:
        return self.config.name

    @property
    def evaluator(self) -> str:
        """The OpenCompass evaluator: ``"@Name"`` (one of ftagent's, :data:`~ftagent.benchmarks.components.PROVIDED`)
        or ``module:Class``; the config renderer resolves it."""
        return self.metric.evaluator

    @property
    def evaluator_kwargs(self) -> dict[str, Any]:
        return self.metric.kwargs | self.config.metric_kwargs

    @property
    def postprocessor(self) -> str | None:
        """The OpenCompass prediction post-processor, ``"@Name"`` or ``module:function`` (None = raw output)."""
        return self.extractor.postprocessor

    @property
    def postprocessor_kwargs(self) -> dict[str, Any]:
        return self.extractor.kwargs | self.config.extractor_kwargs

    @property
    def supports_judge(self) -> bool:
        return self.config.judge

    # --- data -----------------------------------------------------------------------------------
    def bench_dir(self, root: Path) -> Path:
        return Path(root) / self.key

    def raw_dir(self, root: Path) -> Path:
        """Where downloaded source files live: ``<root>/<key>/raw``."""
        return self.bench_dir(root) / "raw"

    def raw_subsets(self, root: Path) -> dict[str, Any]:
        """Source rows per subset (``{subset: rows}`` or, pre-split, ``{subset: {split: rows}}``)."""
        return self._loader(self, Path(root))

    def to_item(self, row: dict[str, Any], subset: str) -> dict[str, Any]:
        """One source row → the prompt's columns + ``answer`` (transform, else ``data.fields``)."""
        if self._item is not None:
            return self._item(row, subset, self)
        fields = self.config.data.fields
        if not fields:
            item = dict(row)
            item["answer"] = str(row[self.config.answer]).strip()
            return item
        item = {}
        for column, sources in fields.items():
            names = [sources] if isinstance(sources, str) else list(sources)
            found = next((row[n] for n in names if row.get(n) not in (None, "")), None)
            if found is None:
                raise KeyError(f"benchmark '{self.key}': a row has none of the columns {names} "
                               f"(has: {', '.join(map(str, row))})")
            item[column] = str(found).strip()
        return item

    def rounds(self, root: Path | None, subset: str) -> list[dict[str, str]]:
        """Chat turns of the prompt; the last HUMAN turn holds the item placeholders."""
        return self._rounds(self, root, subset)

    def prepare(self, root: Path, *, limit: int | None = None, items: CheckedItems | None = None) -> Path:
        """Write ``<root>/<key>/<split>.jsonl`` (and ``<split>/<subset>.jsonl`` per subset): the ``items``
        :meth:`check_data` returned for ``limit`` (read once), else the data read and split now."""
        out = self.bench_dir(root)
        if items is not None and items.limit != limit:
            raise ValueError(f"items checked for limit {items.limit}, prepared for {limit}")
        parts = items.parts if items is not None else self._split(root, limit)
        for split in PREPARED_SPLITS:  # "full": the final evaluation's items (every item outside validation)
            merged: list[dict[str, Any]] = []
            for subset, rows in parts.items():
                write_jsonl(out / split / f"{subset}.jsonl", rows[split])
                merged.extend(rows[split])
            write_jsonl(out / f"{split}.jsonl", merged)
        (out / "spec.json").write_text(self.spec.model_dump_json(indent=2), encoding="utf-8")
        return out

    def _where(self) -> str:
        cfg = self.config
        return f"benchmark file {cfg.source_file}" if cfg.source_file else f"benchmark '{cfg.name}'"

    def _items(self, rows: list[dict[str, Any]], subset: str) -> list[dict[str, Any]]:
        """Items of one sub-dataset's source rows; a row that cannot be one is a clear error."""
        labels = self.config.data.labels
        items = []
        for i, row in enumerate(rows):
            origin = row.pop(SOURCE_KEY, None) if isinstance(row, dict) else None
            origin = origin or f"row {i + 1} of sub-dataset '{subset}'"
            try:
                item = self.to_item(row, subset) | {"subset": subset}
            except KeyError as exc:
                name = exc.args[0] if exc.args else exc
                what = f"has no field {name!r}" if isinstance(name, str) and len(name) < 80 else str(name)
                raise UserInputError(f"{self._where()}: {origin} {what} (has: {', '.join(map(str, row))})") from exc
            except (TypeError, ValueError, IndexError) as exc:
                raise UserInputError(f"{self._where()}: {origin} cannot be read as an item: {exc}") from exc
            if labels is not None and item.get("answer") not in labels:
                raise UserInputError(f"{self._where()}: {origin}: the gold answer {item.get('answer')!r} (field "
                                     f"`{self.config.answer}`) is not one of the options {', '.join(labels)}")
            items.append(item)
        return items

    def _split(self, root: Path, limit: int | None) -> dict[str, dict[str, list[dict[str, Any]]]]:
        from ftagent.benchmarks.splits import final_indices, split_indices

        key = self.config.data.stratify
        parts: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for subset, raw in self.raw_subsets(root).items():
            if isinstance(raw, dict):  # the source names both splits: the final set is its test split
                parts[subset] = {s: self._items(raw[s], subset)[:limit] for s in ("validation", "test")}
                parts[subset]["full"] = parts[subset]["test"]
                continue
            items = self._items(raw, subset)
            if key and items and key not in items[0]:
                raise UserInputError(f"{self._where()}: `data.stratify: {key}` names no column of the items "
                                     f"(they have {', '.join(items[0])})")
            groups = [str(item.get(key, "")) for item in items] if key else None
            parts[subset] = {s: [items[i] for i in idx] for s, idx in split_indices(len(items), limit, groups).items()}
            parts[subset]["full"] = [items[i] for i in final_indices(len(items), limit, groups,
                                                                     rest=self.config.data.final_rest)]
        if not any(rows["validation"] for rows in parts.values()):
            raise UserInputError(f"{self._where()}: the data hold no item to evaluate (source: "
                                 f"{self.spec.data_source}; sub-datasets {', '.join(self.spec.subsets)})")
        # A user's file of 1 row gives validation only and the baseline would fail: refused. A download
        # (the domain families) is the publisher's data; its sub-datasets may be single items in fixtures.
        if self.config.data.loader == "local_files" and not any(rows["test"] for rows in parts.values()):
            n = sum(len(rows["validation"]) for rows in parts.values())
            raise UserInputError(f"{self._where()}: the data give {n} validation item(s) and no test item "
                                 f"(source: {self.spec.data_source}); a benchmark needs at least 2 rows, one for "
                                 "each split (docs/benchmarks.md)")
        return parts

    def check_data(self, root: Path, limit: int | None = None) -> CheckedItems | None:
        """Read and check every row of a benchmark whose data are local files, writing nothing.

        The start-up calls it before anything is written (issue 34.11): a bad row, a missing column or a
        split left empty is exit 2 then, not a failed baseline after the session exists. A benchmark
        whose data must be downloaded is checked when it is prepared (then None is returned).

        Returns:
            The items, in memory: :meth:`prepare` writes them (the files are read once), and a user's
            ``--dataset`` file is scanned against their validation and test splits before anything is written.

        Raises:
            UserInputError: naming the file, row and field.
        """
        if self.config.data.loader != "local_files":
            return None
        return CheckedItems(limit=limit, parts=self._split(root, limit))

    def load_items(self, root: Path, split: Split) -> list[dict[str, Any]]:
        path = self.bench_dir(root) / f"{split}.jsonl"
        if not path.exists():
            raise FileNotFoundError(f"{path} missing: prepare benchmark '{self.key}' first")
        return read_jsonl(path)

    # --- OpenCompass ----------------------------------------------------------------------------
    def evaluator_kwargs_for(self, subset: str, path: Path) -> dict[str, Any]:
        """Evaluator keyword arguments of one sub-dataset (static ones + the metric's per-subset ones)."""
        extra = load_object(self.metric.kwargs_for)(self, subset, path) if self.metric.kwargs_for else {}
        return self.evaluator_kwargs | extra

    def dataset_blocks(self, root: Path, split: Split, *, judge: dict[str, str] | None = None
                       ) -> list[DatasetBlock]:
        """The OpenCompass dataset blocks for ``split`` (one per non-empty subset)."""
        blocks = []
        for subset in self.spec.subsets:
            path = self.bench_dir(root) / split / f"{subset}.jsonl"
            if not path.exists() or path.stat().st_size == 0:
                continue
            blocks.append(DatasetBlock(
                abbr=self.key if len(self.spec.subsets) == 1 else f"{self.key}-{subset}",
                path=str(path.resolve()), input_columns=self.spec.input_columns,
                output_column=self.spec.output_column, rounds=self.rounds(root, subset),
                max_out_len=int(self.config.max_out_len_by_subset.get(subset, self.spec.max_out_len)),
                evaluator=self.evaluator, evaluator_kwargs=self.evaluator_kwargs_for(subset, path),
                postprocessor=self.postprocessor, postprocessor_kwargs=dict(self.postprocessor_kwargs),
                judge=judge if self.supports_judge else None,
            ))
        return blocks
