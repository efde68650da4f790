"""The ``eval_config`` check: the candidate was scored by the baseline's datasets, prompts and scorers.

What decides a split's score in a rendered OpenCompass config is its entries of ``datasets`` (the data file,
reader columns, prompt turns, answer cap, evaluator, post-processor, judge) and the definitions of the names
they use (their ``from module import Name`` lines). :func:`split_digests` hashes exactly that, per split (a
dataset's split is its abbr's ``@<split>`` suffix; a config without suffixes holds one split, key ``""``),
after parsing with :mod:`ast` (formatting and comments do not count):

* a data file (``path=``) counts by its content (SHA-256 of its bytes), not by where it lies, so the
  baseline's evaluation from another session with the same items hashes alike;
* the LLM judge's ``openai_api_base`` counts as "the session's gateway" when it is a loopback URL (a new
  port each session), else as itself; the model, the backend and the runner layout do not count (the model
  is the candidate; the others are ftagent's settings for both).

The digest is taken by ftagent when it renders the config (:mod:`ftagent.tools.opencompass.runs`), before
OpenCompass runs, and travels with the result (``EvalResult.config_sha256``) into the evaluation cache, so
a cached result carries the digest of the config it was computed with. The baseline's digests are recorded
when the baseline is evaluated (``Trace.baseline_eval_configs``) and become the guard's references before
any planner code runs. The check compares the candidate's digest of each split with the baseline's, and a
rendered config still on disk with the digest recorded for it (an edit after rendering is flagged). It is
"not applicable" only when there is nothing to compare, and says why: the baseline's digest was never
recorded (a session started by an older ftagent), or the candidate's evaluator recorded none and rendered
no config here (a plug-in evaluator).
"""

from __future__ import annotations

import ast
import hashlib
import os
from pathlib import Path

from ftagent.engine.events import CheckVerdict

SPLIT_SEP = "@"  # ftagent.tools.opencompass.parse.SPLIT_SEP
_LOOPBACK = ("http://127.0.0.1", "http://localhost", "https://127.0.0.1", "https://localhost")


def _content(path: str) -> str:
    try:
        if os.path.isfile(path) and not os.path.islink(path):
            digest = hashlib.sha256()
            with open(path, "rb") as fh:
                while block := fh.read(1 << 20):
                    digest.update(block)
            return "sha256:" + digest.hexdigest()
    except OSError:
        pass
    return path


class _Canonical(ast.NodeTransformer):
    """One dataset entry with its split suffix, file paths and gateway URL replaced (module doc)."""

    def visit_keyword(self, node: ast.keyword) -> ast.keyword:
        self.generic_visit(node)
        value = node.value
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            if node.arg == "abbr":
                node.value = ast.Constant(value.value.rsplit(SPLIT_SEP, 1)[0])
            elif node.arg == "path":
                node.value = ast.Constant(_content(value.value))
            elif node.arg == "openai_api_base" and value.value.startswith(_LOOPBACK):
                node.value = ast.Constant("<the session's gateway>")
        return node


def _datasets(tree: ast.Module) -> list[ast.expr]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "datasets" for t in node.targets):
            if isinstance(node.value, ast.List):
                return list(node.value.elts)
    return []


def _split_of(entry: ast.expr) -> str:
    for node in ast.walk(entry):
        if isinstance(node, ast.keyword) and node.arg == "abbr" and isinstance(node.value, ast.Constant):
            abbr = str(node.value.value)
            return abbr.rsplit(SPLIT_SEP, 1)[1] if SPLIT_SEP in abbr else ""
    return ""


def split_digests(source: str) -> dict[str, str]:
    """``split -> sha256`` of what decides each split's score in a rendered config (module doc)."""
    tree = ast.parse(source)
    imports = {alias.asname or alias.name: f"from {node.module} import {alias.name}"
               for node in tree.body if isinstance(node, ast.ImportFrom) for alias in node.names}
    groups: dict[str, list[ast.expr]] = {}
    for entry in _datasets(tree):
        groups.setdefault(_split_of(entry), []).append(entry)
    out = {}
    for split, entries in groups.items():
        used = {n.id for e in entries for n in ast.walk(e) if isinstance(n, ast.Name)}
        lines = sorted(imports[name] for name in used if name in imports)
        lines += [ast.unparse(_Canonical().visit(ast.parse(ast.unparse(e), mode="eval")).body) for e in entries]
        out[split] = hashlib.sha256("\n".join(lines).encode()).hexdigest()
    return out


def file_digests(folder: Path) -> dict[str, str]:
    """The split digests of every rendered config (``oc_*.py``) in ``folder``; a one-split file's ``""`` is
    keyed by the split its name says (``oc_<split>.py``)."""
    out: dict[str, str] = {}
    for cfg in sorted(Path(folder).glob("oc_*.py")):
        try:
            digests = split_digests(cfg.read_text(encoding="utf-8", errors="replace"))
        except (OSError, SyntaxError, ValueError):
            out[f"{cfg.name} (unparsable)"] = ""
            continue
        for split, digest in digests.items():
            out[split or cfg.stem.removeprefix("oc_")] = digest
    return out


def eval_config_check(recorded: dict[str, str], folder: Path | None, baseline: dict[str, str]) -> CheckVerdict:
    """Each split the candidate was scored on used the baseline's config (module doc).

    Args:
        recorded: the candidate's ``split -> digest`` as its evaluation recorded them (cached ones included).
        folder: where the candidate's rendered configs are (``<output>/oc``), when it has one.
        baseline: the baseline's ``split -> digest``, recorded when the baseline ran.
    """
    on_disk = file_digests(folder) if folder is not None and Path(folder).is_dir() else {}
    edited = sorted(s for s, d in recorded.items() if s in on_disk and on_disk[s] != d)
    edited += sorted(s for s, d in on_disk.items() if not d)  # a config that no longer parses
    if edited:
        return CheckVerdict(name="eval_config", passed=False,
                            detail=f"the rendered config of {', '.join(edited)} was edited after ftagent rendered it")
    candidate = {**on_disk, **recorded}
    if not candidate:
        return CheckVerdict(name="eval_config", passed=None,
                            detail="the evaluator recorded no config digest and rendered no config here "
                                   "(a plug-in evaluator)")
    if not baseline:
        return CheckVerdict(name="eval_config", passed=None,
                            detail="the baseline's evaluation config was not recorded when it ran (a session "
                                   "started by an older ftagent)")
    differs = sorted(s for s, d in candidate.items() if s in baseline and d != baseline[s])
    unmatched = sorted(s for s in candidate if s not in baseline)
    if differs or unmatched:
        return CheckVerdict(name="eval_config", passed=False,
                            detail="; ".join(([f"{', '.join(differs)}: datasets, prompts or scorers differ from the "
                                               "baseline's"] if differs else [])
                                             + ([f"{', '.join(unmatched)}: no baseline config of that split"]
                                                if unmatched else [])))
    return CheckVerdict(name="eval_config", passed=True,
                        detail=f"{len(candidate)} split(s) scored with the baseline's datasets, prompts and scorers "
                               f"({', '.join(sorted(candidate))}{'; cached result' if not on_disk else ''})")
