"""Recompute ``reference/bioprobench.json``: the official BioProBench metric scripts on our corpora.

Usage (a scratch venv with the scripts' imports: nltk, rouge_score, scikit-learn, tqdm, numpy)::

    FTAGENT_OFFICIAL_BIOPROBENCH=/path/to/YuyangSunshine/bioprotocolbench python tests/parity/official_bioprobench.py

It imports ``Metrics/PQA.py``, ``ORD.py``, ``ERR.py`` and ``GEN.py`` from the checkout and calls their
own extraction and metric functions once per corpus case (no official code is copied here).
Offline stand-ins, GEN only: ``GEN.py`` loads KeyBERT and two sentence-transformers models at
import (downloads) — stub modules take their place, as the keyword and step-embedding metrics are not
compared; NLTK's ``punkt`` and ``wordnet`` cannot be downloaded, so ``word_tokenize`` runs with
``preserve_line=True`` (no sentence split) and METEOR is not computed. ROUGE-L (the headline) is
the official ``rouge_score`` call unchanged.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REFERENCE = HERE / "reference" / "bioprobench.json"
CORPORA = HERE / "corpora"
ENV = "FTAGENT_OFFICIAL_BIOPROBENCH"
TASKS = ("pqa", "ord", "err", "gen")


def _module(checkout: Path, task: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"official_{task}", checkout / "Metrics" / f"{task.upper()}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _gen_stubs() -> None:
    """Stand-ins for the model-loading imports of GEN.py and for NLTK data that is a download."""
    import nltk  # noqa: PLC0415

    class _Model:
        def __init__(self, *a: Any, **k: Any) -> None:
            pass

    sys.modules.setdefault("keybert", types.SimpleNamespace(KeyBERT=_Model))
    sys.modules.setdefault("sentence_transformers", types.SimpleNamespace(SentenceTransformer=_Model, util=None))
    nltk.download = lambda *a, **k: False
    tokenize = nltk.word_tokenize
    nltk.word_tokenize = lambda text, *a, **k: tokenize(text, preserve_line=True)


def _pqa(mod: Any, case: dict) -> Any:
    try:
        answer, _conf = mod.extract_answer_and_confidence(case["output"])
    except Exception:  # noqa: BLE001 - the official loop counts these as failed
        return None
    return answer == case["item"]["answer"]


def _ord(mod: Any, case: dict) -> Any:
    item = case["item"]
    try:
        pred, gold = mod.extract_predicted_order(case["output"], item["wrong_steps"], item["correct_steps"])
    except Exception:  # noqa: BLE001
        return None
    return {"exact": mod.calculate_exact_match([gold], [pred]) == 1.0, "tau": mod.calculate_kendall_tau([gold], [pred])}


def _err(mod: Any, case: dict) -> Any:
    try:
        pred = mod.extract_binary_answer(case["output"])
    except Exception:  # noqa: BLE001
        return None
    return pred == case["item"]["is_correct"]


def _gen(mod: Any, case: dict) -> Any:
    gen = mod.extract_text_response(case["output"])
    m = mod.compute_text_generation_metrics(" ".join(case["item"]["output"]), str(gen))
    return {"rougeL": m["rougeL"], "bleu": m["bleu"]}


def official_scores(checkout: Path) -> dict[str, list[Any]]:
    """Per-output official results for each BioProBench corpus."""
    scores = {}
    for task in TASKS:
        if task == "gen":
            _gen_stubs()
            import nltk.translate.meteor_score  # noqa: PLC0415, F401 - imported by GEN.py, not called here
        mod = _module(checkout, task)
        if task == "gen":
            mod.meteor_score = lambda *a, **k: float("nan")  # needs WordNet (a download); not compared
        cases = json.loads((CORPORA / f"bioprobench_{task}.json").read_text(encoding="utf-8"))
        fn = {"pqa": _pqa, "ord": _ord, "err": _err, "gen": _gen}[task]
        scores[f"bioprobench_{task}"] = [fn(mod, c) for c in cases]
    return scores


def main() -> None:
    checkout = Path(os.environ[ENV]).resolve()
    try:
        commit = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = os.environ.get("FTAGENT_OFFICIAL_COMMIT", "unknown")
    data = {"scorer": {"repo": "YuyangSunshine/bioprotocolbench", "commit": commit,
                       "paths": ["Metrics/PQA.py (extract_answer_and_confidence)",
                                 "Metrics/ORD.py (extract_predicted_order, calculate_exact_match, calculate_kendall_tau)",
                                 "Metrics/ERR.py (extract_binary_answer)",
                                 "Metrics/GEN.py (extract_text_response, compute_text_generation_metrics)"],
                       "how": "python tests/parity/official_bioprobench.py with " + ENV + "=<checkout>; one call per "
                              "corpus case; None = the official parser rejects the output (a 'failed' item); GEN with "
                              "KeyBERT/sentence-transformers stubbed, word_tokenize(preserve_line=True), no METEOR"},
            "scores": official_scores(checkout)}
    out = Path(os.environ.get("FTAGENT_OFFICIAL_OUT", REFERENCE))
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
