"""A user benchmark whose answers need ``\\boxed{}`` and a raw training file that mixes its task with
distractors and junk (issue 35 item 12), at any size.

``python -m tests.helpers.mixed_raw OUT_DIR`` writes the files the offline planner was played on:
``plus11.yaml`` + ``plus11.jsonl`` ("What is N plus 11? Put the final answer in \\boxed{}.", 60 items,
N two-digit) and ``mixed_raw.json`` (3,030 rows: "Add 11 to N." with prose answers, the distractors
"What is N minus 11?" and "What is N plus 12?" -- the benchmark's own wording with another rule --,
word-number rows, empty, non-text and duplicate rows). The unit tests use :func:`mixed_rows` small.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

BENCHMARK_YAML = """name: {name}
description: "Add 11 to a two-digit number. Reply with the result inside \\\\boxed{{}}, nothing else."
data: {{file: {name}.jsonl}}
prompt: "{{question}}"
answer: answer
metric: boxed_integer
"""


def benchmark_items(count: int = 60, seed: int = 0) -> list[dict[str, str]]:
    """``count`` distinct "What is N plus 11?" items, N two-digit, gold ``\\boxed{N+11}``."""
    numbers = random.Random(seed).sample(range(10, 100), count)
    return [{"question": f"What is {n} plus 11? Put the final answer in \\boxed{{}}.", "answer": f"\\boxed{{{n + 11}}}"}
            for n in numbers]


def mixed_rows(target: int = 1000, distractors: int = 950, junk: int = 130, seed: int = 1) -> list[dict]:
    """The raw file: ``target`` "Add 11 to N." rows (one in ten two-digit, the rest three-digit), two
    distractor templates of ``distractors`` rows each, ``junk`` unusable or word-number rows, shuffled."""
    rng = random.Random(seed)
    rows: list[dict] = []
    for i in range(target):
        n = rng.randint(10, 99) if i % 10 == 0 else rng.randint(100, 999)
        rows.append({"instruction": f"Add 11 to {n}.", "input": "", "output": f"Adding 11 to {n} gives {n + 11}."})
    for _ in range(distractors):
        n = rng.randint(10, 999)
        rows.append({"instruction": f"What is {n} minus 11?", "input": "", "output": str(n - 11)})
        n = rng.randint(10, 999)
        rows.append({"instruction": f"What is {n} plus 12?", "input": "", "output": str(n + 12)})
    for i in range(junk):
        rows.append([{"instruction": "", "input": "", "output": "lorem ipsum"},
                     {"instruction": "asdf qwer", "input": "", "output": ""},
                     {"instruction": 12345, "input": "", "output": "x"},
                     {"instruction": "Add 11 to seven.", "input": "", "output": "Adding 11 to seven gives eighteen."},
                     ][i % 4])
    rows += rows[: len(rows) // 10]  # duplicates of earlier rows
    rng.shuffle(rows)
    return rows


def write_benchmark(folder: Path, name: str = "plus11", count: int = 60) -> Path:
    """``<name>.yaml`` and its data file in ``folder``; returns the YAML's path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in benchmark_items(count)),
                                         encoding="utf-8")
    path = folder / f"{name}.yaml"
    path.write_text(BENCHMARK_YAML.format(name=name), encoding="utf-8")
    return path


def main(out: str) -> None:
    folder = Path(out)
    write_benchmark(folder)
    (folder / "mixed_raw.json").write_text(json.dumps(mixed_rows()), encoding="utf-8")
    print(f"wrote {folder}/plus11.yaml, plus11.jsonl, mixed_raw.json")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
