"""Domain benchmark families of FT-Dojo: PANORAMA, ChemCoTBench, TableBench, BioProBench.

Light on purpose (plain data + lazy imports): the modules of this package use only the standard
library (RDKit optional) so OpenCompass subprocesses in the tool env can import them.

* ``KEY_SPECS`` — the 21 benchmark keys: category, HF source, training dataset, sub-tasks with
  their core metric, the key's core metric, direction and ``max_out_len`` (a view of their YAML files
  in configs/benchmarks/, computed on access).
* :func:`evaluate_subtask` — score raw model outputs of one sub-task against its items.
* :func:`core_value` — the key's headline number from per-sub-task results.
"""

from __future__ import annotations

import importlib
from typing import Any

MEAN_CORE = "mean_core"  # a key whose headline is the plain mean of its sub-tasks' core metrics


def _key_specs() -> dict[str, dict[str, Any]]:
    """The domain keys' facts, read from their YAML files (configs/benchmarks/<key>.yaml)."""
    from ftagent.benchmarks.registry import BENCHMARKS

    specs: dict[str, dict[str, Any]] = {}
    for key, path in BENCHMARKS.builtin_files().items():
        cfg = BENCHMARKS.config(path)
        if cfg.data.loader != "domain":
            continue
        options = dict(cfg.data.options)
        info = {"family": options.pop("family"), "category": cfg.category, "hf_source": cfg.data.repo,
                "training_dataset": cfg.related_datasets[0], "subtasks": dict(cfg.subset_metrics),
                "core_metric": cfg.core_metric, "direction": cfg.direction, "max_out_len": cfg.max_out_len}
        if cfg.max_out_len_by_subset:
            info["max_out_len_by_subtask"] = dict(cfg.max_out_len_by_subset)
        options.pop("layout", None)
        specs[key] = info | options
    return specs


def __getattr__(name: str) -> Any:
    """``KEY_SPECS``: a read-only view of the 21 domain keys' YAML files (built on first access, so
    this package stays standard-library-only for OpenCompass processes that never touch it)."""
    if name == "KEY_SPECS":
        return _key_specs()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_MODULES = {"panorama": "panorama", "chemcotbench": "chemcot", "tablebench": "tablebench",
            "bioprobench": "bioprobench"}


def family_module(family: str) -> Any:
    """The module of a family (``panorama``, ``chemcotbench``, ``tablebench``, ``bioprobench``)."""
    return importlib.import_module(f"{__name__}.{_MODULES[family]}")


def evaluate_subtask(family: str, subtask: str, predictions: list[str], items: list[dict[str, Any]],
                     **kwargs: Any) -> dict[str, Any]:
    """Score raw model outputs of one sub-task.

    Args:
        family: ``panorama`` | ``chemcotbench`` | ``tablebench`` | ``bioprobench``.
        subtask: A key of that family's ``subtasks`` (e.g. ``par4pc``, ``Murcko_scaffold``,
            ``visualization``, ``ORD``).
        predictions: Raw model outputs, one per item.
        items: The loaded items (as returned by the family's ``load_items``), same order.
        **kwargs: Passed to the metric (e.g. ``fork_fallback``, ``oracle``, ``timeout_s``, ``python``).

    Returns:
        Named metrics (see the family module); ``status``/``reason`` present when not computable.
    """
    mod = family_module(family)
    if family == "panorama":
        return mod.METRICS[subtask](predictions, items, **kwargs)
    if family == "chemcotbench":
        return mod.metrics(subtask, predictions, items, **kwargs)
    if family == "tablebench":
        if subtask == "visualization":
            return mod.visualization_metrics(predictions, items, **kwargs)
        if subtask == "data_analysis":
            return mod.data_analysis_metrics(predictions, items)
        # fact_checking and numerical_reasoning: exact match after Final-Answer extraction (as the
        # reference); numeric_metrics (±10 %) is what DataAnalysis's numeric subtypes use.
        return mod.exact_match_metrics(predictions, [str(i["answer"]) for i in items])
    return mod.METRICS[subtask](predictions, [mod.reference(subtask, i) for i in items])


def core_value(key: str, results: dict[str, dict[str, Any]]) -> float | None:
    """Headline of ``key`` from ``{subtask: metrics}``: the sub-task's core metric, or the plain mean
    of the core metrics of the sub-tasks present. ``None`` when none is computable (no silent 0)."""
    spec = _key_specs()[key]
    found = [results[s].get(m) for s, m in spec["subtasks"].items() if s in results]
    values = [float(v) for v in found if isinstance(v, (int, float))]
    return sum(values) / len(values) if values else None
