"""The integrity guard's result types and file hashing (issue 31 item 5), shared by the checks
(:mod:`ftagent.models.integrity`, :mod:`ftagent.finetune.integrity`), the ``integrity`` event and the report.

A check is a pure function over files on disk; its verdict is ``passed`` True (clean), False (flagged:
the candidate cannot become SOTA) or None (not applicable here, e.g. a weight distance for a LoRA adapter,
which is checked by its declared base instead).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, Field


class IntegrityCheck(BaseModel):
    """One check's verdict on one candidate."""

    name: str  # a key of CHECK_KINDS: tokenizer | chat_template | architecture | weights | benchmark_files |
    # eval_config | data_script | contamination | constant_answers
    passed: bool | None = None  # None: not applicable / nothing to check
    detail: str = ""

    @property
    def flagged(self) -> bool:
        return self.passed is False


class CheckKind(BaseModel):
    """What a flag of one check means, for the planner's prompts (issue 35: a ``benchmark_files`` flag read
    like experiment feedback, and the planner could not tell whether its own code had caused it)."""

    meaning: str  # what the flag says happened
    by_experiment: bool  # the experiment (its data script, data, config or trained model) can cause it
    advice: str  # what to do about it: a fix for the experiment's cause, else why nothing needs to change


#: Every check the guard runs (``ftagent.finetune.integrity`` and ``ftagent.models.integrity`` name them;
#: tests/unit/test_issue35_integrity.py checks that each produced name is here).
CHECK_KINDS: dict[str, CheckKind] = {
    "tokenizer": CheckKind(
        meaning="the trained model's tokenizer (vocabulary or special tokens) differs from the base model's and "
                "from the validated debug run's", by_experiment=True,
        advice="leave the vocabulary alone: no keys that add tokens or resize it (new_special_tokens, resize_vocab)"),
    "chat_template": CheckKind(
        meaning="the trained model's chat template differs from the base model's and from the one the validated "
                "debug run wrote, so evaluation would not use the chat format that was checked", by_experiment=True,
        advice="keep `template` and the keys that change the chat format as they were validated"),
    "architecture": CheckKind(
        meaning="the trained model's architecture (model type, layer shapes, vocabulary size) differs from the "
                "base model's, or a LoRA adapter names another base", by_experiment=True,
        advice="train the given base model; no keys that resize the vocabulary or change the model"),
    "weights": CheckKind(
        meaning="the trained weights do not descend from the base model (sampled tensors are uncorrelated "
                "with the base's): another checkpoint, or weights the training destroyed", by_experiment=True,
        advice="train the base model as given; a learning rate far too high can wreck the weights"),
    "benchmark_files": CheckKind(
        meaning="the benchmark's data files or ftagent's evaluator sources changed after the session started "
                "(they are outside your workspace)", by_experiment=False,
        advice="not caused by your code: your scripts run in a sandbox that does not mount these files, so the "
               "change came from outside the experiment (another process, or ftagent edited during the "
               "session); nothing in your plan needs to change because of it"),
    "eval_config": CheckKind(
        meaning="the evaluation config rendered for this model (datasets, prompts, scorer) differs from the one "
                "the baseline was scored with", by_experiment=False,
        advice="not caused by your code: ftagent renders that part from the benchmark, and nothing in your "
               "train.yaml or data reaches it; nothing in your plan needs to change because of it"),
    "data_script": CheckKind(
        meaning="process_data.py names the benchmark's folder or tried to read it", by_experiment=True,
        advice="never refer to the benchmark's files: build the training data from the raw datasets and "
               "generated samples only"),
    "contamination": CheckKind(
        meaning="the training data (data.json) holds validation or test items: copied, paraphrased, or their "
                "gold answers copied into outputs", by_experiment=True,
        advice="drop such rows in process_data.py (the contamination rule is under Training data rules)"),
    "constant_answers": CheckKind(
        meaning="the model gave (nearly) the same answer to every validation item: the score measures one "
                "guess, not a skill", by_experiment=True,
        advice="vary the training targets (data that teaches one answer collapses the model), or lower the "
               "learning rate if the model collapsed"),
}


def flag_parts(flag: str) -> tuple[str, str]:
    """``("benchmark_files", "changed since …")`` of a recorded flag (``"<check>: <detail>"``)."""
    name, _, detail = flag.partition(":")
    return name.strip(), detail.strip()


class IntegrityVerdict(BaseModel):
    """Every check of one candidate; flagged when any check failed."""

    checks: list[IntegrityCheck] = Field(default_factory=list)

    @property
    def flagged(self) -> list[IntegrityCheck]:
        return [c for c in self.checks if c.flagged]

    def text(self) -> str:
        """One line: 'integrity: 6 checks clean' or the flagged checks and why."""
        if not self.flagged:
            ran = sum(1 for c in self.checks if c.passed is not None)
            return f"integrity: {ran} check(s) clean"
        return "integrity FLAGGED: " + "; ".join(f"{c.name}: {c.detail}" for c in self.flagged)


def file_sha256(path: Path, chunk: int = 1 << 20) -> str:
    """The SHA-256 of one file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def tree_hashes(roots: Iterable[Path], *, suffixes: tuple[str, ...] | None = None) -> dict[str, str]:
    """``path -> sha256`` of every file under ``roots`` (a file root is hashed itself); ``suffixes``
    limits which files count (e.g. ``(".py",)`` for source trees). Caches (``__pycache__``) are skipped."""
    out: dict[str, str] = {}
    for root in roots:
        root = Path(root)
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else []
        for path in files:
            if "__pycache__" in path.parts or (suffixes and path.suffix not in suffixes):
                continue
            out[str(path)] = file_sha256(path)
    return out


def changed_files(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Files added, removed or edited between two :func:`tree_hashes` (sorted)."""
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
