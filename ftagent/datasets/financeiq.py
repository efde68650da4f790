"""FinanceIQ: Chinese multiple-choice questions from 10 financial certification exams.

The hub repo has ``data/dev/<subject>.csv`` (few-shot examples) and ``data/test/<subject>.csv``. The
``FinanceIQ_gen`` benchmark splits every test CSV by the standard rule
(:mod:`ftagent.benchmarks.splits`: seed-42 shuffle, then ``k = min(100, n // 2)`` rows each to
validation and test). The training copy keeps only the rows in **neither** split
(``data/train/<subject>.csv``, :func:`training_rows`) and drops ``dev/`` (the 5-shot examples), so
no row the benchmark evaluates is ever trained on. Subjects with at most 200 rows keep at most one.
"""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

from ftagent.benchmarks.splits import unused_indices
from ftagent.datasets.base import DatasetSpec, FunctionSource


def training_rows(n_rows: int) -> list[int]:
    """Row indices (ascending) of a subject CSV that the benchmark uses for neither validation nor test."""
    return unused_indices(n_rows)


def _read_csv(path: Path) -> tuple[list[str], list[list[str]]]:
    with path.open(encoding="utf-8", newline="") as fh:
        rows = [r for r in csv.reader(fh) if r]  # blank lines skipped, as the benchmark's csv.DictReader does
    return (rows[0], rows[1:]) if rows else ([], [])


def _write_csv(path: Path, header: list[str], rows: list[list[str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".csv.tmp")
    with tmp.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    tmp.replace(path)


def make_training_split(dataset_dir: Path) -> dict[str, int]:
    """Post-download hook: keep only the rows in neither benchmark split of every test CSV; delete ``dev/``.

    Idempotent: a copy that has no ``test/`` folder any more is left alone.

    Returns:
        Training rows kept per subject.
    """
    root = Path(dataset_dir)
    kept: dict[str, int] = {}
    for dev in [p for p in root.rglob("dev") if p.is_dir()]:
        shutil.rmtree(dev)
    for test_dir in [p for p in root.rglob("test") if p.is_dir()]:
        train_dir = test_dir.parent / "train"
        for path in sorted(test_dir.glob("*.csv")):
            header, rows = _read_csv(path)
            keep = training_rows(len(rows))
            _write_csv(train_dir / path.name, header, [rows[i] for i in keep])
            kept[path.stem] = len(keep)
        shutil.rmtree(test_dir)
    return kept


def to_alpaca(dataset_dir, limit=None, seed=0):
    """Alpaca rows from ``data/train/*.csv`` in the benchmark's own prompt/answer format."""
    import csv
    import random
    from pathlib import Path

    rows = []
    for path in sorted(Path(dataset_dir).rglob("train/*.csv")):
        subject = path.stem
        with path.open(encoding="utf-8", newline="") as fh:
            records = list(csv.reader(fh))[1:]
        for rec in records:
            if len(rec) < 7 or rec[6].strip() not in {"A", "B", "C", "D"}:
                continue
            question, a, b, c, d, answer = (x.strip() for x in rec[1:7])
            prompt = (f"以下是关于{subject}的单项选择题，请直接给出正确答案的选项。\n"
                      f"题目：{question}\nA. {a}\nB. {b}\nC. {c}\nD. {d}")
            rows.append({"instruction": prompt, "input": "", "output": f"答案是: {answer}"})
    random.Random(seed).shuffle(rows)
    return rows if limit is None else rows[:limit]


SOURCE = FunctionSource(
    spec=DatasetSpec(
        name="financeiq",
        repo_id="Duxiaoman-DI/FinanceIQ",
        related_benchmarks=["FinanceIQ_gen", "financeiq*"],
        task_type="finance reasoning (multiple choice, Chinese)",
        license="CC-BY-NC-SA-4.0",
        summary="10 subjects of Chinese financial exam questions, answer A-D",
        hook_description="dev/ deleted; each test CSV cut to the rows in neither of the benchmark's splits "
                         "(seed-42 shuffle, min(100, n//2) rows each to validation and test) → train/",
    ),
    converter=to_alpaca,
    hook=make_training_split,
)
