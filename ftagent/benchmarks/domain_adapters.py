"""Benchmark adapters for the 21 FT-Dojo domain keys (PANORAMA, ChemCoTBench, TableBench, BioProBench).

One generic :class:`DomainAdapter` is built per key of :data:`ftagent.benchmarks.domain.KEY_SPECS`.
Data come from the published HF dataset, downloaded once into ``<root>/<key>/raw/`` (offline: put
the files there yourself, see :func:`raw_dir`). Each prepared JSONL row holds the fully built prompt
(``prompt``), a short gold text for reports (``answer``), the sub-task (``subset``) and the whole
loaded item as a JSON string (``item_json``); the OpenCompass evaluator
(:class:`ftagent.tools.opencompass.oc_domain.DomainEvaluator`) reads ``item_json`` back, so metrics that need
the full record (PANORAMA silver answers, the mol_opt source molecule, table contents) get it.

Sub-datasets are the sub-tasks of the key (one OpenCompass dataset each); the key's headline is
the sub-task's core metric, or ``mean_core`` (plain mean of the sub-tasks' core metrics) for keys
that group several sub-tasks.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ftagent.benchmarks.base import BenchmarkSpec, DatasetBlock, Split, TableAdapter, hub_snapshot
from ftagent.benchmarks.domain import KEY_SPECS, MEAN_CORE, family_module

EVALUATOR = "ftagent.tools.opencompass.oc_domain:DomainEvaluator"
DATA_SUFFIXES = (".json", ".jsonl", ".parquet")

# Files each family's loader reads under raw/ (also the download filter; None = the whole repo).
_LAYOUT = {
    "panorama": "<TASK>/test.parquet (or .jsonl/.json) for TASK in PAR4PC, PI4PC, NOC4PC",
    "chemcotbench": "any .json/.jsonl/.parquet files holding rows with task/subtask/query/gt/meta",
    "tablebench": "TableBench_TCoT.jsonl",
    "bioprobench": "<TASK>_test.json for TASK in PQA, ORD, ERR, GEN",
}
_ANSWER_RULES = {
    "panorama": "text after </think>; JSON answer (letters / paragraph key / code); official metrics "
                "(silver answers from the full item)",
    "chemcotbench": "text after </think>; JSON field of the sub-task (count, SMILES, Yes/No, choice); "
                    "RDKit molecule comparison (unavailable status without RDKit or oracle)",
    "tablebench": "text after 'Final Answer:' (EM / ±10 % / ROUGE-L by qsubtype); visualization: the "
                  "python block runs in a sandbox, y series compared",
    "bioprobench": "content of [ANSWER_START]…[ANSWER_END]; accuracy / Kendall tau / F1 / ROUGE-L",
}
_PROMPTS = {
    "panorama": "prebuilt per item by ftagent.benchmarks.domain.panorama.build_prompt ({prompt})",
    "chemcotbench": "the published 'query' used verbatim ({prompt})",
    "tablebench": "prebuilt per item by ftagent.benchmarks.domain.tablebench.build_prompt ({prompt})",
    "bioprobench": "prebuilt per item by ftagent.benchmarks.domain.bioprobench.build_prompt ({prompt})",
}


def raw_dir(root: Path, key: str) -> Path:
    """Where the published files of ``key`` live: ``<root>/<key>/raw``."""
    return Path(root) / key / "raw"


def _has_data(folder: Path) -> bool:
    return folder.is_dir() and any(p.suffix in DATA_SUFFIXES for p in folder.rglob("*") if p.is_file())


def _allow_patterns(family: str, subtasks: list[str]) -> list[str] | None:
    if family == "panorama":
        return [f"{s.upper()}/*" for s in subtasks]
    if family == "tablebench":
        return ["TableBench_TCoT.jsonl"]
    if family == "bioprobench":
        return [f"{s.upper()}_test.json" for s in subtasks]
    return None


def _json_default(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else str(value)


def gold_text(family: str, subtask: str, item: dict[str, Any]) -> str:
    """A short, human-readable gold answer for reports and error samples."""
    if family == "panorama":
        if subtask == "noc4pc":
            ans = item.get("answer")
            return str(ans.get("code") if isinstance(ans, dict) else ans)
        return json.dumps(item.get("gold_answers"), default=_json_default)
    if family == "bioprobench":
        ref = family_module(family).reference(subtask, item)
        return "\n".join(map(str, ref)) if subtask == "GEN" and isinstance(ref, list) else str(ref)
    if family == "chemcotbench" and subtask in KEY_SPECS["chemcotbench_mol_opt"]["subtasks"]:
        return f"improve {subtask} of {item.get('source_smiles')}"
    return str(item.get("answer", ""))


class DomainAdapter(TableAdapter):
    """Adapter for one domain key: sub-tasks as sub-datasets, prompts prebuilt, generic evaluator."""

    evaluator = EVALUATOR
    postprocessor = None  # the domain extractors work on the raw output (reasoning blocks included)

    def __init__(self, key: str) -> None:
        self.key = key
        self.info = KEY_SPECS[key]
        family = self.info["family"]
        subtasks = list(self.info["subtasks"])
        core = self.info["core_metric"]
        metric_note = ", ".join(f"{s}: {m}" for s, m in self.info["subtasks"].items())
        self.spec = BenchmarkSpec(
            key=key, category=self.info["category"], data_source=f"hf:{self.info['hf_source']}",
            related_datasets=[self.info["training_dataset"]], prompt=_PROMPTS[family],
            answer_rule=_ANSWER_RULES[family],
            evaluator=f"{EVALUATOR} (core per sub-task: {metric_note}"
                      + ("; headline = mean of these" if core == MEAN_CORE else "") + ")",
            core_metric=core, direction=self.info["direction"], max_out_len=self.info["max_out_len"],
            input_columns=["prompt"], output_column="answer", subsets=subtasks,
        )

    @property
    def family(self) -> str:
        return str(self.info["family"])

    # --- data -----------------------------------------------------------------------------------
    def ensure_raw(self, root: Path) -> Path:
        """The raw folder, downloaded from the Hub when it holds no data files yet.

        Raises:
            EnvironmentFailure: offline/unreachable Hub; the message says where to put which files.
        """
        from ftagent.core.errors import EnvironmentFailure

        raw = raw_dir(root, self.key)
        if _has_data(raw) or (raw / ".complete").exists():
            return raw
        try:
            return hub_snapshot(self.info["hf_source"], raw, _allow_patterns(self.family, self.spec.subsets))
        except EnvironmentFailure as exc:
            raise EnvironmentFailure(
                f"benchmark '{self.key}' needs the files of HF dataset '{self.info['hf_source']}' and the "
                f"Hub is unreachable. Put them into {raw} (layout: {_LAYOUT[self.family]}) and rerun. "
                f"Cause: {exc}") from exc

    def load_subtask(self, raw: Path, subtask: str) -> list[dict[str, Any]]:
        """Items of one sub-task in the loaded form the family's metrics expect ([] when absent)."""
        mod = family_module(self.family)
        try:
            if self.family == "chemcotbench":
                return mod.load_items(str(raw), mod.task_of(subtask), subtask)
            if self.family == "tablebench":
                return mod.load_items(str(raw), subtask)
            return mod.load_items(str(raw), subtask)
        except FileNotFoundError:
            return []

    def build_prompt(self, subtask: str, item: dict[str, Any]) -> str:
        """The prompt text of one item."""
        mod = family_module(self.family)
        if self.family == "panorama":
            return mod.build_prompt(subtask, item, cot=bool(self.info.get("cot")))
        if self.family == "bioprobench":
            return mod.build_prompt(subtask, item)
        return mod.build_prompt(item)

    def raw_subsets(self, root: Path) -> dict[str, list[dict[str, Any]]]:
        raw = self.ensure_raw(root)
        subsets = {s: self.load_subtask(raw, s) for s in self.spec.subsets}
        if not any(subsets.values()):
            raise FileNotFoundError(f"no items of {', '.join(self.spec.subsets)} under {raw} "
                                    f"(expected layout: {_LAYOUT[self.family]})")
        return {s: rows for s, rows in subsets.items() if rows}

    def to_item(self, row: dict[str, Any], subset: str) -> dict[str, Any]:
        return {"prompt": self.build_prompt(subset, row), "answer": gold_text(self.family, subset, row),
                "item_json": json.dumps(row, ensure_ascii=False, default=_json_default)}

    # --- OpenCompass ----------------------------------------------------------------------------
    def rounds(self, root: Path, subset: str) -> list[dict[str, str]]:
        return [{"role": "HUMAN", "prompt": "{prompt}"}]

    def evaluator_kwargs_for(self, subset: str, path: Path) -> dict[str, Any]:
        """Keyword arguments of :class:`~ftagent.tools.opencompass.oc_domain.DomainEvaluator` for a sub-dataset."""
        return {"family": self.family, "subtask": subset, "core_metric": self.info["subtasks"][subset],
                "headline": MEAN_CORE if self.info["core_metric"] == MEAN_CORE else None,
                "items_path": str(path.resolve())}

    def dataset_blocks(self, root: Path, split: Split, *, judge: dict[str, str] | None = None
                       ) -> list[DatasetBlock]:
        blocks = []
        by_subtask = self.info.get("max_out_len_by_subtask", {})
        for subset in self.spec.subsets:
            path = self.bench_dir(root) / split / f"{subset}.jsonl"
            if not path.exists() or path.stat().st_size == 0:
                continue
            blocks.append(DatasetBlock(
                abbr=self.key if len(self.spec.subsets) == 1 else f"{self.key}-{subset}",
                path=str(path.resolve()), input_columns=self.spec.input_columns,
                output_column=self.spec.output_column, rounds=self.rounds(root, subset),
                max_out_len=int(by_subtask.get(subset, self.spec.max_out_len)), evaluator=self.evaluator,
                evaluator_kwargs=self.evaluator_kwargs_for(subset, path), postprocessor=None,
            ))
        return blocks


def _adapter_class(key: str) -> type[DomainAdapter]:
    name = "".join(part.capitalize() for part in key.split("_")) + "Adapter"
    return type(name, (DomainAdapter,), {"__init__": lambda self: DomainAdapter.__init__(self, key),
                                         "__doc__": f"Domain benchmark adapter for ``{key}``."})


#: ``ADAPTERS.<key>`` is the adapter class of each of the 21 keys (registered lazily by
#: :mod:`ftagent.benchmarks.registry` as ``"ftagent.benchmarks.domain_adapters:ADAPTERS.<key>"``).
ADAPTERS = SimpleNamespace(**{key: _adapter_class(key) for key in KEY_SPECS})
