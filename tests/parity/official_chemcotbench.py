"""Recompute ``reference/chemcotbench.json``: the official ChemCoTBench scorers on our corpora.

Usage (in a scratch venv with the official code's requirements: rdkit, nltk, rouge_score,
Levenshtein, selfies, scikit-learn, networkx, PyTDC 0.4.1 and its import-time deps)::

    FTAGENT_OFFICIAL_CHEMCOTBENCH=/path/to/IDEA-XL/ChemCoTBench python tests/parity/official_chemcotbench.py

It imports the official modules from the checkout (``baseline_and_eval/eval/*.py``,
``evaluator.py``, ``rxnutils.py``) and executes the *definitions* of the official demo notebooks
(``molund_eval_demo.ipynb``, ``moledit_eval_demo.ipynb``, ``molopt_eval_demo.ipynb``,
``rxn_eval_demo.ipynb``: imports, assignments and ``def``s; their top-level calls are skipped). The
notebooks' functions read ``logs/<task>/<model>.json``; here their file reads are served from memory
with one corpus case at a time, so every output gets its own official score. No official code is
copied into this file.

Offline stand-ins (the only deviations from a networked run):

* DRD2/GSK3β/JNK3: PyTDC downloads the classifier files; both sides are given
  :func:`stand_in_oracle` (heavy-atom count) instead, so extraction, validity and the success rule
  are compared, not the classifiers.
* penalised logP's SA score needs ``oracle/fpscores.pkl`` (a download): the same table, shipped in
  RDKit's ``Contrib/SA_Score/fpscores.pkl.gz``, is unpacked there.
* ``nltk.download('wordnet')`` at import fails offline; nothing scored here uses WordNet.
* PyTDC 0.4.1 imports ``rdkit.six.iteritems`` (removed from RDKit 2020+): a two-line shim module.

This module is importable without the official code (the parity test uses :func:`stand_in_oracle`).
"""

from __future__ import annotations

import ast
import contextlib
import gzip
import io
import json
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REFERENCE = HERE / "reference" / "chemcotbench.json"
CORPORA = HERE / "corpora"
ENV = "FTAGENT_OFFICIAL_CHEMCOTBENCH"
STAND_IN = ("drd", "gsk", "jnk")
MODEL = "corpus"


def stand_in_oracle(smiles: str | None) -> float | None:
    """Heavy-atom count (``None`` when invalid): the shared stand-in for the downloaded classifiers."""
    from rdkit import Chem, RDLogger  # noqa: PLC0415

    RDLogger.DisableLog("rdApp.*")
    mol = Chem.MolFromSmiles(smiles) if isinstance(smiles, str) else None
    return None if mol is None else float(mol.GetNumHeavyAtoms())


def corpus_names() -> list[str]:
    """The ChemCoTBench corpora (``chemcotbench_<task>-<subtask>``), sorted."""
    return sorted(p.stem for p in CORPORA.glob("chemcotbench_*.json"))


# ---------------------------------------------------------------- running the official notebooks

class _Reads:
    """Serves ``json.load(open(path))`` / ``read_json(path)`` of the notebooks from memory."""

    def __init__(self, files: dict[str, list[dict]]) -> None:
        self.files = files

    def open(self, path: str, *_a: Any, **_k: Any) -> str:
        return path

    def load(self, path: str) -> list[dict]:
        for suffix, records in self.files.items():
            if str(path).endswith(suffix):
                return json.loads(json.dumps(records))
        raise FileNotFoundError(path)

    def dump(self, *_a: Any, **_k: Any) -> None:
        return None


def _notebook_defs(path: Path) -> str:
    """Imports, assignments and function definitions of a notebook's code cells (no top-level calls)."""
    keep = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.Assign)
    parts = []
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] != "code":
            continue
        tree = ast.parse("".join(cell["source"]))
        parts += [ast.unparse(node) for node in tree.body if isinstance(node, keep)]
    return "\n".join(parts)


def _run_notebook(src: str, files: dict[str, list[dict]], call: str,
                  overrides: dict[str, Any] | None = None) -> list[tuple]:
    """Execute the notebook definitions with in-memory reads, run ``call``; return the prints."""
    printed: list[tuple] = []
    reads = _Reads(files)
    ns: dict[str, Any] = {"__name__": "official_notebook", "print": lambda *a, **k: printed.append(a)}
    exec(compile(src, "<notebook>", "exec"), ns)  # noqa: S102 - the official notebook's own code
    ns["open"], ns["read_json"] = reads.open, reads.load
    ns["json"] = type("J", (), {"load": staticmethod(reads.load), "dump": staticmethod(reads.dump),
                                "loads": staticmethod(json.loads), "JSONDecodeError": json.JSONDecodeError})
    ns.update(overrides or {})
    with contextlib.redirect_stdout(io.StringIO()):
        exec(call, ns)  # noqa: S102
    return printed


# ---------------------------------------------------------------- per sub-task

_MOLUND_TASK = {"fg_count": "fg_samples", "ring_count": "ring_count", "Murcko_scaffold": "murcko_scaffold",
                "ring_system_scaffold": "ring_system_scaffold"}
_MOLUND_DUMMY = {"fg_samples": {"json_results": {"count": "1"}, "fg_num": 1},
                 "ring_count": {"json_results": {"count": "1"}, "count": 1},
                 "murcko_scaffold": {"json_results": {"Output Scaffold": "c1ccccc1"}, "largest_scaffold": "c1ccccc1"},
                 "ring_system_scaffold": {"json_results": {"output": "Yes"}},
                 "mutated": {"json_results": {"output": "No"}}, "permutated": {"json_results": {"output": "Yes"}}}
_NB_KEY = {"fg_samples": "fg_samples", "ring_count": "ring_count", "murcko_scaffold": "murcko",
           "ring_system_scaffold": "ring_system", "mutated": "mutated", "permutated": "permutated"}


def _molund(src: str, subtask: str, case: dict) -> Any:
    item, out = case["item"], case["output"]
    if subtask == "equivalence":
        folder = "permutated" if str(item["gt"]).lower() == "yes" else "mutated"
    else:
        folder = _MOLUND_TASK[subtask]
    record = {"json_results": out, "fg_num": item["gt"], "count": item["gt"], "largest_scaffold": item["gt"]}
    files = {f"logs/{f}/{MODEL}.json": [record if f == folder else d] for f, d in _MOLUND_DUMMY.items()}
    printed = _run_notebook(src, files, f"evaluate_molund_score(model_name={MODEL!r})")
    res = next(a[2] for a in printed if len(a) == 3 and a[1] == _NB_KEY[folder])
    valid = res[f"{_NB_KEY[folder]}-valid-rate"] == 1.0
    if subtask == "Murcko_scaffold":
        return float(res["score"]) if valid else 0.0
    if subtask in ("fg_count", "ring_count"):
        return valid and res["score"] == 0   # the official score is the absolute error
    return valid and res["score"] == 1.0


def _moledit(src: str, subtask: str, case: dict) -> Any:
    item = case["item"]
    meta = json.loads(item["meta"])
    source = item["query"].split("Input Molecule: ")[1].split(",")[0].strip()
    dummy = {"json_results": '{"output": "CCO"}', "molecule": "CC", "added_group": "hydroxyl", "removed_group": "hydroxyl"}
    record = {"json_results": case["output"], "molecule": source, "added_group": meta.get("added_group"),
              "removed_group": meta.get("removed_group")}
    files = {f"logs/{t}/{MODEL}.json": [record if t == subtask else dummy] for t in ("add", "delete", "sub")}
    try:
        printed = _run_notebook(src, files, f"evaluate_moledit_score(model_name={MODEL!r})")
    except ZeroDivisionError:  # no parsable output: the official run divides by zero valid items
        return False
    res = next(a[1] for a in printed if len(a) == 2 and str(a[0]).startswith("eval_score_"))
    return res[subtask]["correct_rate"] == 1.0


def _molopt(src: str, subtask: str, case: dict) -> Any:
    import eval.eval_metric as metric  # noqa: PLC0415 - official module
    import eval.eval_molopt as molopt  # noqa: PLC0415

    source = case["item"]["query"].rsplit("Source Molecule: ", 1)[1].strip()[:-1]
    real_oracle = metric.tdc.Oracle

    def oracle(name: str, **kw: Any) -> Any:
        return stand_in_oracle if name in ("drd2", "gsk3b", "jnk3") else real_oracle(name=name, **kw)

    def only_target(optimized_prop: str, **kw: Any) -> Any:
        return molopt.eval_molopt_from_list(optimized_prop=optimized_prop, **kw) if optimized_prop == subtask else {}

    files = {f"logs/{p}/{MODEL}.json": ([{"json_results": case["output"], "src_smiles": source}] if p == subtask else [])
             for p in ("logp", "solubility", "qed", "drd", "jnk", "gsk")}
    metric.tdc.Oracle = oracle
    try:
        printed = _run_notebook(src, files, f"evaluate_molopt_score(model_name={MODEL!r})",
                                {"eval_molopt_from_list": only_target})
    finally:
        metric.tdc.Oracle = real_oracle
    res = next(a[1] for a in printed if len(a) == 2 and str(a[0]).startswith("eval_score_"))
    return res[subtask]["improvement"]["success_rate"] == 1.0


_RXN_CALL = {"rcr": "evaluate_RCR", "nepp": "evaluate_NEPP", "fs": "evaluate_fs", "retro": "evaluate_retro",
             "mechsel": "evaluate_mechsel"}


def _reaction(src: str, subtask: str, case: dict, tmp: str) -> Any:
    item, out = case["item"], case["output"]
    record = {"gt": item["gt"], "json_response": out}
    if subtask == "retro":
        record = {"reactants": item["gt"], "json_response": out}
    printed = _run_notebook(src, {f"/{MODEL}.json": [record]}, f"{_RXN_CALL[subtask]}({MODEL!r}, {tmp!r})")
    if subtask == "mechsel":
        return float(str(printed[-1][0]).rsplit(":", 1)[1]) == 1.0
    return next(float(a[1]) for a in printed if a and a[0] == "exact_match: ") == 1.0


def _guarded(fn: Any, notes: dict[str, str], index: int, *args: Any) -> Any:
    """The official score, or ``False`` (noted) when the official code raises on this output."""
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - an official crash means the output is not scored
        notes[str(index)] = f"official code raised {type(exc).__name__}: {str(exc)[:120]}"
        return False


def _rdkit_six_shim() -> None:
    """PyTDC 0.4.1 still imports ``rdkit.six`` (gone from current RDKit): provide ``iteritems``."""
    import types  # noqa: PLC0415

    six = types.ModuleType("rdkit.six")
    six.iteritems = lambda d: iter(d.items())
    sys.modules.setdefault("rdkit.six", six)


def official_scores(checkout: Path) -> tuple[dict[str, list[Any]], dict[str, dict[str, str]]]:
    """Per-output official scores for every ChemCoTBench corpus, and notes on official crashes."""
    base = checkout / "baseline_and_eval"
    sys.path.insert(0, str(base))
    _rdkit_six_shim()
    nb = {name: _notebook_defs(base / f"{name}_eval_demo.ipynb") for name in ("molund", "moledit", "molopt", "rxn")}
    scores: dict[str, list[Any]] = {}
    notes: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        oracle_dir = Path(tmp) / "oracle"
        oracle_dir.mkdir()
        from rdkit.Chem import RDConfig  # noqa: PLC0415

        table = pickle.load(gzip.open(Path(RDConfig.RDContribDir) / "SA_Score" / "fpscores.pkl.gz"))
        (oracle_dir / "fpscores.pkl").write_bytes(pickle.dumps(table))
        cwd = os.getcwd()
        os.chdir(tmp)
        try:
            for name in corpus_names():
                task, subtask = name.removeprefix("chemcotbench_").split("-")
                cases = json.loads((CORPORA / f"{name}.json").read_text(encoding="utf-8"))
                fn = {"mol_und": _molund, "mol_edit": _moledit, "mol_opt": _molopt}.get(task)
                src = nb[{"mol_und": "molund", "mol_edit": "moledit", "mol_opt": "molopt"}.get(task, "rxn")]
                notes[name] = {}
                scores[name] = [_guarded(fn, notes[name], i, src, subtask, c) if fn else
                                _guarded(_reaction, notes[name], i, src, subtask, c, tmp)
                                for i, c in enumerate(cases)]
                print(name, sum(map(float, scores[name])), "/", len(cases), file=sys.stderr)
        finally:
            os.chdir(cwd)
    return scores, notes


def provenance(checkout: Path) -> dict[str, Any]:
    """Repository, commit and the files that scored the corpora."""
    try:
        commit = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = os.environ.get("FTAGENT_OFFICIAL_COMMIT", "unknown")
    return {"repo": "IDEA-XL/ChemCoTBench", "commit": commit,
            "paths": ["baseline_and_eval/molund_eval_demo.ipynb (evaluate_molund_score) + eval/eval_molund.py",
                      "baseline_and_eval/moledit_eval_demo.ipynb (evaluate_moledit_score) + eval/eval_moledit.py",
                      "baseline_and_eval/molopt_eval_demo.ipynb (evaluate_molopt_score) + eval/eval_molopt.py, "
                      "eval/eval_metric.py (PyTDC 0.4.1 oracles)",
                      "baseline_and_eval/rxn_eval_demo.ipynb (evaluate_RCR/NEPP/fs/retro/mechsel) + evaluator.py"],
            "how": "python tests/parity/official_chemcotbench.py with " + ENV + "=<checkout>, one corpus case per "
                   "notebook call (reads served from memory); drd/gsk/jnk with stand_in_oracle; SA fpscores from "
                   "RDKit Contrib; per-output score: correct (bool) or, for Murcko_scaffold, the scaffold soft score"}


def main() -> None:
    checkout = Path(os.environ[ENV]).resolve()
    scores, notes = official_scores(checkout)
    data = {"scorer": provenance(checkout), "scores": scores, "official_errors": notes}
    out = Path(os.environ.get("FTAGENT_OFFICIAL_OUT", REFERENCE))  # the live check writes elsewhere
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out}: {sum(len(v) for v in data['scores'].values())} scores")


if __name__ == "__main__":
    main()
