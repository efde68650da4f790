"""Multiple-choice knowledge benchmark helpers: ``mmlu`` rows and the ``FinanceIQ_gen`` loader/5-shot turns.

The benchmarks are configs/benchmarks/mmlu.yaml and FinanceIQ_gen.yaml. Published layouts: MMLU
(``cais/mmlu``) rows ``{"question", "subject", "choices": [4], "answer": 0-3}``; FinanceIQ
(``Duxiaoman-DI/FinanceIQ``) CSV files ``data/{dev,test}/<subject>.csv`` with the columns
``,Question,A,B,C,D,Answer`` (an unnamed index column first; lower-case names are accepted too).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ftagent.benchmarks.base import hub_snapshot, read_table
from ftagent.benchmarks.loaders import fill

LETTERS = "ABCD"


def mmlu_item(row: dict[str, Any]) -> dict[str, Any]:
    """An MMLU row → ``{question, subject, A..D, answer letter}``."""
    choices = list(row["choices"])
    answer = row["answer"]
    letter = LETTERS[int(answer)] if str(answer).isdigit() else str(answer).strip().upper()
    out = {"question": row["question"], "subject": str(row.get("subject", "")).replace("_", " ")}
    out.update({LETTERS[i]: str(c) for i, c in enumerate(choices[:4])})
    out["answer"] = letter
    return out


def mmlu_row(row: dict[str, Any], subset: str, bench: Any) -> dict[str, Any]:
    """Item transform ``mmlu``."""
    return mmlu_item(row)


def _financeiq_raw(bench: Any, root: Path | None) -> Path:
    data = bench.config.data
    return hub_snapshot(data.repo or "", bench.raw_dir(root), data.allow_patterns, gated=data.gated)


def load_financeiq(bench: Any, root: Path) -> dict[str, list[dict[str, Any]]]:
    """Loader ``financeiq``: every row of ``data/test/<subject>.csv``, one subset per subject.

    Each subject's test CSV is split by the standard rule (:mod:`ftagent.benchmarks.splits`: seeded
    shuffle, then validation and test); the training copy (:mod:`ftagent.datasets.financeiq`) keeps
    only the rows in neither split.

    Raises:
        UserInputError: the test folder holds none of the subjects' CSV files.
    """
    from ftagent.benchmarks.loaders import tagged_rows
    from ftagent.core.errors import UserInputError

    test_dir = _financeiq_raw(bench, root) / bench.config.data.options.get("test_dir", "data/test")
    found = {s: tagged_rows(test_dir / f"{s}.csv") for s in bench.spec.subsets if (test_dir / f"{s}.csv").exists()}
    if not found:
        raise UserInputError(f"benchmark '{bench.key}': no subject CSV (<subject>.csv for "
                             f"{', '.join(bench.spec.subsets)}) in {test_dir}")
    return found


def financeiq_rounds(bench: Any, root: Path | None, subset: str) -> list[dict[str, str]]:
    """Prompt builder ``financeiq_dev``: the subject's first ``shots`` dev rows as worked examples."""
    options = bench.config.data.options
    dev_dir = _financeiq_raw(bench, root) / options.get("dev_dir", "data/dev")
    placeholder = "{" + options.get("subset_placeholder", "subject") + "}"
    template = bench.config.prompt.replace(placeholder, subset)
    turns: list[dict[str, str]] = []
    for row in read_table(dev_dir / f"{subset}.csv")[: int(options.get("shots", 5))]:
        item = bench.to_item(row, subset)
        turns += [{"role": "HUMAN", "prompt": fill(template, item)},
                  {"role": "BOT", "prompt": fill(options.get("shot_answer", "{answer}"), item) + "\n"}]
    return turns + [{"role": "HUMAN", "prompt": template}]
