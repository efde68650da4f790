"""ChemCoTBench: loader, prompt, answer extraction (loads the model's JSON answer) and metrics.

Records (HF ``OpenMol/ChemCoTBench``, one ``train`` split): ``id``, ``query`` (the prompt, used
verbatim), ``task`` ∈ {mol_und, mol_edit, mol_opt, reaction}, ``subtask``, ``gt``, ``meta`` (JSON
string). Chemistry metrics use RDKit when it is importable (``pip install rdkit``); without it they
report ``status="unavailable"``. DRD2/GSK3β/JNK3 oracles are downloaded model files in PyTDC: offline
they report ``status="oracle unavailable"`` unless an oracle callable is passed in.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Sequence
from typing import Any

from . import chem
from .common import (
    ORACLE_UNAVAILABLE,
    as_obj,
    first_int,
    mean,
    parse_json_object,
    pct,
    read_records,
    strip_think,
    unavailable,
)

TASKS = {
    "mol_und": ("fg_count", "ring_count", "Murcko_scaffold", "ring_system_scaffold", "equivalence"),
    "mol_edit": ("add", "delete", "sub"),
    "mol_opt": ("drd", "gsk", "jnk", "logp", "qed", "solubility"),
    "reaction": ("fs", "retro", "rcr", "nepp", "mechsel"),
}
SUBTASK_CORE = {
    "fg_count": "accuracy", "ring_count": "accuracy", "Murcko_scaffold": "scaffold_hard",
    "ring_system_scaffold": "accuracy", "equivalence": "accuracy",
    "add": "correct_rate", "delete": "correct_rate", "sub": "correct_rate",
    **{s: "success_rate" for s in TASKS["mol_opt"]},
    "fs": "exact_match", "retro": "exact_match", "rcr": "exact_match", "nepp": "exact_match",
    "mechsel": "accuracy",
}
_KEYS = {
    "fg_count": ("count", "answer"), "ring_count": ("count", "answer"),
    "equivalence": ("output", "answer"), "ring_system_scaffold": ("output", "answer"),
    "Murcko_scaffold": ("Output Scaffold", "output", "answer"),
    "mechsel": ("choice", "answer"), "fs": ("Major Product", "output", "answer"),
    # rcr and nepp: the keys the real queries ask for ({"SMILES": str}, {"pred_smi": str})
    "retro": ("Reactants", "output", "answer"), "rcr": ("SMILES", "answer"), "nepp": ("pred_smi", "output", "answer"),
}
_EDIT_KEYS = ("output", "answer")
_OPT_KEYS = ("Final Target Molecule", "Final_Target_Molecule", "output", "answer")
_SOURCE_RE = re.compile(r"(?:Input Molecule|Molecule SMILES|Source Molecule)\s*:\s*([^\s,;]+)")
# ether0-style answers (the official model logs): <|think_start|>…<|think_end|><|answer_start|>…<|answer_end|>
_ANSWER_TAG = re.compile(r"<\|answer_start\|>(.*?)<\|answer_end\|>", re.DOTALL)


def task_of(subtask: str) -> str:
    """The task a subtask belongs to (``KeyError`` if unknown)."""
    return next(t for t, subs in TASKS.items() if subtask in subs)


# ---------------------------------------------------------------- loader and prompt

def normalise_item(row: dict[str, Any]) -> dict[str, Any]:
    """Add the derived reference fields (``answer``, ``source_smiles``, ``group_a``/``group_b``)."""
    item = dict(row)
    meta = as_obj(item.get("meta")) or {}
    item["meta"] = meta if isinstance(meta, dict) else {}
    task, sub, gt = item.get("task"), item.get("subtask"), item.get("gt")
    answer = gt
    if sub == "fs":
        parsed = as_obj(gt)
        answer = parsed.get("Major Product", gt) if isinstance(parsed, dict) else gt
    if task == "mol_edit":
        answer = item["meta"].get("reference", gt)
        item["group_a"] = item["meta"].get("removed_group" if sub == "delete" else "added_group")
        item["group_b"] = item["meta"].get("removed_group") if sub == "sub" else None
    if task in ("mol_edit", "mol_opt"):
        m = _SOURCE_RE.search(item.get("query") or "")
        # every real query ends "Source Molecule: <SMILES>." - the sentence's period is not SMILES
        item["source_smiles"] = m.group(1).rstrip(".") if m else item["meta"].get("source", item["meta"].get("src"))
    item["answer"] = "" if answer is None else str(answer)
    return item


def load_items(root: str, task: str | None = None, subtask: str | None = None) -> list[dict[str, Any]]:
    """All records in ``.json``/``.jsonl``/``.parquet`` files under ``root`` (recursively), filtered
    by ``task``/``subtask`` and normalised with :func:`normalise_item`. Files are read in sorted order."""
    items = []
    for dirpath, _dirs, files in sorted(os.walk(root)):
        for name in sorted(files):
            if name.endswith((".json", ".jsonl", ".parquet")):
                for row in read_records(os.path.join(dirpath, name)):
                    if (task is None or row.get("task") == task) and (subtask is None or row.get("subtask") == subtask):
                        items.append(normalise_item(row))
    return items


def build_prompt(item: dict[str, Any]) -> str:
    """The published ``query`` is the prompt (used verbatim)."""
    return str(item["query"])


# ---------------------------------------------------------------- extraction

def _from_json(text: str, keys: Sequence[str]) -> str | None:
    obj = parse_json_object(text.replace("\n", " "))
    if obj is not None:
        for key in keys:
            if key in obj and obj[key] is not None:
                return str(obj[key]).strip()
    # a complete "key": value pair in otherwise invalid JSON (e.g. the template's trailing comma),
    # as the official parse_raw_response; an unterminated value (truncated output) is no answer
    for key in keys:
        k = re.escape(key)
        m = re.search(r'"' + k + r'"\s*:\s*"([^"]+)"', text) or re.search(r'"' + k + r'"\s*:\s*([^,}\s"]+)\s*[,}]', text)
        if m:
            return m.group(1).strip()
    return None


def extract_answer(text: str | None, subtask: str) -> str | None:
    """The answer of one ChemCoT output: the value of the asked JSON key (``count``, ``output``,
    ``Output Scaffold``, ``Final Target Molecule``, ``Major Product``, ``Reactants``, ``SMILES``,
    ``pred_smi``, ``choice``; ``answer`` for every sub-task), or the span of ether0-style
    ``<|answer_start|>…<|answer_end|>`` tags; ``None`` otherwise."""
    text = strip_think(text)
    task = task_of(subtask)
    keys = _EDIT_KEYS if task == "mol_edit" else _OPT_KEYS if task == "mol_opt" else _KEYS[subtask]
    tag = _ANSWER_TAG.search(text)
    if tag:  # the answer span of a tagged answer (its JSON if it holds one, else the span itself)
        body = tag.group(1).strip().removesuffix("</answer>").strip()
        return _from_json(body, keys) or body or None
    # only the asked JSON key (or "answer") counts, as the official scorers read only the JSON: free
    # text ("There are 3 rings and 2 ...") is not an answer and its first number may be the wrong one
    return _from_json(text, keys)


# ---------------------------------------------------------------- metrics

def _yes_no(value: str | None) -> str:
    return (value or "").strip().strip(".").lower()


def mol_und_metrics(subtask: str, predictions: Sequence[str], references: Sequence[str]) -> dict[str, Any]:
    """fg_count/ring_count: ``accuracy`` (exact count) + ``mae`` (unparseable counts as 0);
    equivalence/ring_system_scaffold: Yes/No ``accuracy``; Murcko_scaffold: ``scaffold_hard``
    (% same molecule as the gold scaffold), ``scaffold_soft`` (the benchmark's score: mean scaffold
    consistency of gold and prediction ×100) and ``tanimoto`` (Morgan r2/1024, ×100, invalid → 0)."""
    preds = [extract_answer(t, subtask) for t in predictions]
    n = len(preds)
    if subtask in ("fg_count", "ring_count"):
        ints = [first_int(p) for p in preds]
        golds = [int(float(r)) for r in references]
        return {"accuracy": pct(sum(p == g for p, g in zip(ints, golds, strict=True)), n),
                "mae": mean([abs((p or 0) - g) for p, g in zip(ints, golds, strict=True)]),
                "unparseable": sum(p is None for p in ints)}
    if subtask in ("equivalence", "ring_system_scaffold"):
        hits = sum(_yes_no(p) == _yes_no(r) and _yes_no(p) != "" for p, r in zip(preds, references, strict=True))
        return {"accuracy": pct(hits, n), "unparseable": sum(p is None for p in preds)}
    if not chem.available():
        return unavailable({"scaffold_hard": None, "tanimoto": None}, chem.missing_reason())
    hard = sum(chem.same_molecule(p, r) for p, r in zip(preds, references, strict=True))
    sims = [chem.tanimoto(p, r, radius=2, n_bits=1024) for p, r in zip(preds, references, strict=True)]
    # the benchmark's own Murcko score: scaffold consistency of the gold and predicted scaffolds
    soft = [chem.scaffold_similarity(r, p)[1] if p is not None and chem.mol(p) is not None else 0.0
            for p, r in zip(preds, references, strict=True)]
    return {"scaffold_hard": pct(hard, n), "scaffold_soft": 100 * mean(soft), "tanimoto": 100 * mean(sims),
            "valid_rate": pct(sum(chem.mol(p) is not None for p in preds), n)}


def mol_edit_metrics(subtask: str, predictions: Sequence[str], items: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``correct_rate`` (core): the functional-group count changed as asked (add +1, delete -1,
    sub: removed -1 and added +1); ``valid_rate``; ``tanimoto`` (Morgan r2/2048 to the reference ×100)."""
    if not chem.available():
        return unavailable({"correct_rate": None, "valid_rate": None, "tanimoto": None}, chem.missing_reason())
    preds = [extract_answer(t, subtask) for t in predictions]
    correct = valid = 0
    sims = []
    for pred, item in zip(preds, items, strict=True):
        valid += chem.mol(pred) is not None
        correct += chem.edit_correct(subtask, item.get("source_smiles"), pred, item.get("group_a"), item.get("group_b"))
        sims.append(chem.tanimoto(pred, item.get("answer"), radius=2, n_bits=2048))
    n = len(preds)
    return {"correct_rate": pct(correct, n), "valid_rate": pct(valid, n), "tanimoto": 100 * mean(sims)}


def _percentile(values: Sequence[float], q: float) -> float:
    """numpy's default (linear) percentile."""
    ordered = sorted(values)
    pos = q / 100 * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _winsorised_mean(values: Sequence[float]) -> float:
    """Mean after clipping at the 5th/95th percentiles (the official ``compute_statistics(skew=True)``)."""
    if not values:
        return 0.0
    lo, hi = _percentile(values, 5), _percentile(values, 95)
    return mean([min(max(v, lo), hi) for v in values])


OPT_THRESHOLDS = {"drd": 0.3, "gsk": 0.3, "jnk": 0.3, "qed": 0.3, "logp": 0.5, "solubility": 0.5}


def mol_opt_metrics(subtask: str, predictions: Sequence[str], items: Sequence[dict[str, Any]],
                    oracle: Callable[[str], float | None] | None = None) -> dict[str, Any]:
    """Property optimisation. improvement = oracle(pred) − oracle(source) for valid pairs.

    ``success_rate`` (core) = % of all items with improvement > 0; ``best_rate`` = % with improvement
    ≥ threshold (0.3 drd/gsk/jnk/qed, 0.5 logp/solubility); ``mean_improvement``: the official
    5/95 % winsorised mean over all items (0.0 for an unscored one);
    ``valid_smiles_rate``; ``scaffold_hard``/``scaffold_soft`` (Murcko scaffold kept). Oracles:
    logp = penalised logP (PyTDC's ``logp``), qed = RDKit QED, solubility = the official ESOL;
    drd/gsk/jnk need ``oracle`` (PyTDC model files), else ``status="oracle unavailable"``.
    """
    keys = ("success_rate", "best_rate", "mean_improvement", "valid_smiles_rate", "scaffold_hard", "scaffold_soft")
    if not chem.available():
        return unavailable(dict.fromkeys(keys), chem.missing_reason())
    oracle = oracle or chem.property_oracle(subtask)
    if oracle is None:
        return unavailable(dict.fromkeys(keys), f"no offline oracle for '{subtask}': PyTDC downloads the "
                           "model file on first use; pass oracle=... to score it", ORACLE_UNAVAILABLE)
    improvements, success, best, valid, hard, soft = [], 0, 0, 0, 0, []
    for text, item in zip(predictions, items, strict=True):
        pred, src = extract_answer(text, subtask), item.get("source_smiles")
        if pred is None or src is None or chem.mol(pred) is None or chem.mol(src) is None:  # mol(None) is None
            soft.append(0.0)
            continue
        valid += 1
        h, s = chem.scaffold_similarity(src, pred)
        hard, soft = hard + h, soft + [s]
        a, b = oracle(pred), oracle(src)
        if a is None or b is None:
            continue
        delta = a - b
        improvements.append(delta)
        success += delta > 0
        best += delta >= OPT_THRESHOLDS.get(subtask, 0.3)
    n = len(predictions)
    # official: unscored items count as improvement 0.0, then the 5/95 % winsorised mean
    padded = improvements + [0.0] * (n - len(improvements))
    return {"success_rate": pct(success, n), "best_rate": pct(best, n), "mean_improvement": _winsorised_mean(padded),
            "valid_smiles_rate": pct(valid, n), "scaffold_hard": pct(hard, n), "scaffold_soft": 100 * mean(soft)}


def _condition_smiles(pred: str | None) -> str | None:
    """rcr: the condition part of an answer written as a reaction (as the benchmark's RCR scorer):
    ``a>>b`` → ``a``, ``a>b>c`` → ``b``."""
    if pred and ">>" in pred:
        return pred.split(">>")[0]
    if pred and ">" in pred:
        return pred.split(">")[1]
    return pred


def reaction_metrics(subtask: str, predictions: Sequence[str], references: Sequence[str]) -> dict[str, Any]:
    """fs/retro/rcr/nepp: ``exact_match`` (same molecule without stereochemistry: InChI of the
    non-isomeric canonical SMILES, as the benchmark's ``MoleculeSMILESEvaluator``; retro: the same
    molecules as a set, a published gold whose reactants lost their ``.`` read as its cuts,
    :func:`chem.same_reactants`; plain string equality with ``status="degraded"`` without RDKit)
    + ``validity``; rcr reads the condition part
    of a reaction-style answer first; mechsel: first capital letter ``accuracy``."""
    preds = [extract_answer(t, subtask) for t in predictions]
    if subtask == "rcr":
        preds = [_condition_smiles(p) for p in preds]
    n = len(preds)
    if subtask == "mechsel":
        def cap(s: str | None) -> str | None:
            m = re.search(r"[A-Z]", s or "")
            return m.group(0) if m else None
        hits = sum(cap(p) is not None and cap(p) == cap(r) for p, r in zip(preds, references, strict=True))
        return {"accuracy": pct(hits, n)}
    if not chem.available():
        hits = sum(p is not None and p.strip() == r.strip() for p, r in zip(preds, references, strict=True))
        return unavailable({"exact_match": pct(hits, n), "validity": None},
                           chem.missing_reason() + "; exact_match is plain string equality", "degraded")
    # retro golds are kept as published (half lost the "." between reactants): chem.same_reactants
    same = chem.same_reactants if subtask == "retro" else functools.partial(chem.same_molecule, isomeric=False)
    hits = sum(same(p, r) for p, r in zip(preds, references, strict=True))
    return {"exact_match": pct(hits, n), "validity": pct(sum(chem.mol(p) is not None for p in preds), n)}


def metrics(subtask: str, predictions: Sequence[str], items: Sequence[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
    """Dispatch to the metric of ``subtask``; ``items`` are normalised items (``answer`` = reference)."""
    task = task_of(subtask)
    if task == "mol_edit":
        return mol_edit_metrics(subtask, predictions, items)
    if task == "mol_opt":
        return mol_opt_metrics(subtask, predictions, items, **kwargs)
    refs = [str(i["answer"]) for i in items]
    return (mol_und_metrics if task == "mol_und" else reaction_metrics)(subtask, predictions, refs)
