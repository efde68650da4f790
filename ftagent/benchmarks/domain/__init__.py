"""Domain benchmark families of FT-Dojo: PANORAMA, ChemCoTBench, TableBench, BioProBench.

Light on purpose (plain data + lazy imports): the modules of this package use only the standard
library (RDKit optional) so OpenCompass subprocesses in the tool env can import them.

* :data:`KEY_SPECS` — the 21 benchmark keys: category, HF source, training dataset, sub-tasks with
  their core metric, the key's core metric, direction and ``max_out_len``.
* :func:`evaluate_subtask` — score raw model outputs of one sub-task against its items.
* :func:`core_value` — the key's headline number from per-sub-task results.
"""

from __future__ import annotations

import importlib
from typing import Any

MEAN_CORE = "mean_core"  # a key whose headline is the plain mean of its sub-tasks' core metrics

_PAN = "LG-AI-Research/PANORAMA"
_CHEM = "OpenMol/ChemCoTBench"
_TAB = "Multilingual-Multimodal-NLP/TableBench"
_BIO = "bowenxian/BioProBench"
_PAN_CORE = {"par4pc": "macro_f1", "pi4pc": "gold_hit_rate", "noc4pc": "macro_f1"}
_CHEM_SUBS = {
    "mol_und": {"fg_count": "accuracy", "ring_count": "accuracy", "Murcko_scaffold": "scaffold_hard",
                "ring_system_scaffold": "accuracy", "equivalence": "accuracy"},
    "mol_edit": {"add": "correct_rate", "delete": "correct_rate", "sub": "correct_rate"},
    "mol_opt": {s: "success_rate" for s in ("drd", "gsk", "jnk", "logp", "qed", "solubility")},
    "reaction": {"fs": "exact_match", "retro": "exact_match", "rcr": "exact_match", "nepp": "exact_match",
                 "mechsel": "accuracy"},
}
_TAB_CORE = {"fact_checking": "accuracy", "numerical_reasoning": "accuracy", "data_analysis": "accuracy",
             "visualization": "Pass@1"}
_BIO_CORE = {"GEN": "ROUGE-L", "ORD": "kendall_tau", "ERR": "f1", "PQA": "accuracy"}


def _spec(family: str, category: str, source: str, train: str, subtasks: dict[str, str], max_out_len: int,
          **extra: Any) -> dict[str, Any]:
    core = next(iter(subtasks.values())) if len(subtasks) == 1 else MEAN_CORE
    return {"family": family, "category": category, "hf_source": source, "training_dataset": train,
            "subtasks": subtasks, "core_metric": core, "direction": "max", "max_out_len": max_out_len, **extra}


KEY_SPECS: dict[str, dict[str, Any]] = {}
for _t, _m in _PAN_CORE.items():
    KEY_SPECS[f"panorama_{_t}"] = _spec("panorama", "patent", _PAN, "panorama", {_t: _m}, 8192, cot=False)
    KEY_SPECS[f"panorama_{_t}_cot"] = _spec("panorama", "patent", _PAN, "panorama", {_t: _m}, 16384, cot=True,
                                            max_input_tokens=16384)
KEY_SPECS["panorama"] = _spec("panorama", "patent", _PAN, "panorama", dict(_PAN_CORE), 8192, cot=False)
for _t, _subs in _CHEM_SUBS.items():
    KEY_SPECS[f"chemcotbench_{_t}"] = _spec("chemcotbench", "chemistry", _CHEM, "chemcot", dict(_subs), 1024)
KEY_SPECS["chemcotbench"] = _spec("chemcotbench", "chemistry", _CHEM, "chemcot",
                                  {s: m for subs in _CHEM_SUBS.values() for s, m in subs.items()}, 1024)
for _t, _m in _TAB_CORE.items():
    KEY_SPECS[f"tablebench_{_t}"] = _spec("tablebench", "table", _TAB, "tableinstruct", {_t: _m},
                                          16384 if _t == "visualization" else 4096)
KEY_SPECS["tablebench_gen"] = _spec("tablebench", "table", _TAB, "tableinstruct", dict(_TAB_CORE), 4096,
                                    max_out_len_by_subtask={"visualization": 16384})
for _t, _m in _BIO_CORE.items():
    # No dataset-level cap in the reference: the model default (8192) applies.
    KEY_SPECS[f"bioprobench_{_t.lower()}"] = _spec("bioprobench", "biology", _BIO, "bioprobench", {_t: _m}, 8192)

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
    spec = KEY_SPECS[key]
    values = [results[s].get(m) for s, m in spec["subtasks"].items() if s in results]
    values = [float(v) for v in values if isinstance(v, (int, float))]
    return sum(values) / len(values) if values else None
