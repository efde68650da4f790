"""Components of the 21 FT-Dojo domain benchmarks (PANORAMA, ChemCoTBench, TableBench, BioProBench).

The benchmarks are configs/benchmarks/<key>.yaml (family defaults in ``_<family>.yaml``); they name
the loader ``domain``, the item transform ``domain`` and the metric ``domain``, implemented here.
Data come from the published HF dataset, downloaded once into ``<root>/<key>/raw/`` (offline: put the
files there yourself, see :func:`raw_dir`). Each prepared JSONL row holds the fully built prompt
(``prompt``), a short gold text for reports (``answer``), the sub-task (``subset``) and the whole
loaded item as a JSON string (``item_json``); the OpenCompass evaluator
(:class:`ftagent.tools.opencompass.oc_domain.DomainEvaluator`) reads ``item_json`` back, so metrics that need
the full record (PANORAMA silver answers, the mol_opt source molecule, table contents) get it.

Sub-datasets are the sub-tasks of the key (``subsets`` / ``subset_metrics`` in the YAML); the key's
headline is the sub-task's core metric, or ``mean_core`` (plain mean of the sub-tasks' core metrics).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ftagent.benchmarks.base import COMPLETE, hub_snapshot, raw_state
from ftagent.benchmarks.domain import MEAN_CORE, family_module

DATA_SUFFIXES = (".json", ".jsonl", ".parquet")


def raw_dir(root: Path, key: str) -> Path:
    """Where the published files of ``key`` live: ``<root>/<key>/raw``."""
    return Path(root) / key / "raw"


def family_of(bench: Any) -> str:
    """The family named by the YAML (``data.options.family``)."""
    return str(bench.config.data.options["family"])


def _json_default(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else str(value)


def ensure_raw(bench: Any, root: Path) -> Path:
    """The raw folder, downloaded from the Hub unless complete (or filled by hand).

    A folder holding the Hub's download cache but no completion marker is an interrupted download:
    it is fetched again (resumed), never read half-written. Files put there by hand (no download
    cache) are used as they are and marked complete.

    Raises:
        EnvironmentFailure: offline/unreachable Hub or a gated repo; the message says where to put which files.
    """
    from ftagent.core.errors import EnvironmentFailure

    data = bench.config.data
    raw = raw_dir(root, bench.key)
    state = raw_state(raw)
    if state == "manual":
        (raw / COMPLETE).write_text("manual\n", encoding="utf-8")
    if state in ("complete", "manual"):
        return raw
    try:
        return hub_snapshot(data.repo or "", raw, data.allow_patterns, gated=data.gated)
    except EnvironmentFailure as exc:
        raise EnvironmentFailure(
            f"benchmark '{bench.key}' needs the files of HF dataset '{data.repo}' and they cannot be downloaded. "
            f"Put them into {raw} (layout: {data.options.get('layout', '-')}) and rerun. Cause: {exc}") from exc


def load_subtask(bench: Any, raw: Path, subtask: str) -> list[dict[str, Any]]:
    """Items of one sub-task in the loaded form the family's metrics expect ([] when absent)."""
    family = family_of(bench)
    mod = family_module(family)
    try:
        if family == "chemcotbench":
            return mod.load_items(str(raw), mod.task_of(subtask), subtask)
        return mod.load_items(str(raw), subtask)
    except FileNotFoundError:
        return []


def load_rows(bench: Any, root: Path) -> dict[str, list[dict[str, Any]]]:
    """Loader ``domain``: the loaded items of every sub-task found under ``raw/``."""
    raw = ensure_raw(bench, root)
    subsets = {s: load_subtask(bench, raw, s) for s in bench.spec.subsets}
    if not any(subsets.values()):
        raise FileNotFoundError(f"no items of {', '.join(bench.spec.subsets)} under {raw} "
                                f"(expected layout: {bench.config.data.options.get('layout', '-')})")
    return {s: rows for s, rows in subsets.items() if rows}


def build_prompt(bench: Any, subtask: str, item: dict[str, Any]) -> str:
    """The prompt text of one item."""
    family = family_of(bench)
    mod = family_module(family)
    if family == "panorama":
        return mod.build_prompt(subtask, item, cot=bool(bench.config.data.options.get("cot")))
    if family == "bioprobench":
        return mod.build_prompt(subtask, item)
    return mod.build_prompt(item)


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
    if family == "chemcotbench" and family_module(family).task_of(subtask) == "mol_opt":
        return f"improve {subtask} of {item.get('source_smiles')}"
    return str(item.get("answer", ""))


def to_item(row: dict[str, Any], subset: str, bench: Any) -> dict[str, Any]:
    """Item transform ``domain``: prebuilt prompt, short gold text and the full item as JSON."""
    return {"prompt": build_prompt(bench, subset, row), "answer": gold_text(family_of(bench), subset, row),
            "item_json": json.dumps(row, ensure_ascii=False, default=_json_default)}


def evaluator_kwargs(bench: Any, subset: str, path: Path) -> dict[str, Any]:
    """Keyword arguments of :class:`~ftagent.tools.opencompass.oc_domain.DomainEvaluator` for a sub-dataset."""
    cfg = bench.config
    return {"family": family_of(bench), "subtask": subset, "core_metric": cfg.subset_metrics[subset],
            "headline": MEAN_CORE if cfg.core_metric == MEAN_CORE else None, "items_path": str(Path(path).resolve())}
