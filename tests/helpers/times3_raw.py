"""The ``times3`` user benchmark ("What is 3 times N? Put the final answer in \\boxed{}.", N two-digit, 60
items) and a raw training file that states the task in other words, with distractors and junk (issue 39
item 5's case: the relay round played on it, docs/llm.md).

``python -m tests.helpers.times3_raw OUT_DIR`` writes ``times3.yaml`` + ``times3.jsonl`` and
``times3_raw.json`` (3,333 rows: "Multiply N by 3." with prose answers -- nine in ten N three-digit, one in
ten two-digit, none a benchmark number --, the distractors "What is 4 times N?" and "What is N plus 3?", word-number rows, empty,
non-text and duplicate rows). Keep the files outside any folder the player of the LLM reads.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

BENCHMARK_YAML = """name: {name}
description: "Multiply a two-digit number by 3. Reply with the result inside \\\\boxed{{}}, nothing else."
data: {{file: {name}.jsonl}}
prompt: "{{question}}"
answer: answer
metric: boxed_integer
"""


def benchmark_numbers(count: int = 60, seed: int = 3) -> list[int]:
    """The items' N: ``count`` distinct two-digit numbers."""
    return random.Random(seed).sample(range(10, 100), count)


def benchmark_items(count: int = 60, seed: int = 3) -> list[dict[str, str]]:
    """``count`` distinct "What is 3 times N?" items, N two-digit, gold ``\\boxed{3N}``."""
    numbers = benchmark_numbers(count, seed)
    return [{"question": f"What is 3 times {n}? Put the final answer in \\boxed{{}}.", "answer": f"\\boxed{{{3 * n}}}"}
            for n in numbers]


def raw_rows(target: int = 1000, distractors: int = 950, junk: int = 130, seed: int = 4) -> list[dict]:
    """The raw file: ``target`` "Multiply N by 3." rows (one in ten two-digit, the rest three-digit), two
    distractor templates of ``distractors`` rows each, ``junk`` unusable or word-number rows, a tenth
    duplicated, shuffled. The two-digit rows use only the 30 numbers the benchmark does not: the same
    question in other words is the item, and start-up refuses a ``--dataset`` that holds one."""
    rng = random.Random(seed)
    used = set(benchmark_numbers())
    free = [n for n in range(10, 100) if n not in used]
    rows: list[dict] = []
    for i in range(target):
        n = rng.choice(free) if i % 10 == 0 else rng.randint(100, 999)
        rows.append({"instruction": f"Multiply {n} by 3.", "input": "",
                     "output": f"Multiplying {n} by 3 gives {3 * n}."})
    for _ in range(distractors):
        n = rng.randint(10, 999)
        rows.append({"instruction": f"What is 4 times {n}?", "input": "", "output": str(4 * n)})
        n = rng.randint(10, 999)
        rows.append({"instruction": f"What is {n} plus 3?", "input": "", "output": str(n + 3)})
    for i in range(junk):
        rows.append([{"instruction": "", "input": "", "output": "lorem ipsum"},
                     {"instruction": "asdf qwer", "input": "", "output": ""},
                     {"instruction": 12345, "input": "", "output": "x"},
                     {"instruction": "Multiply seven by 3.", "input": "", "output": "Multiplying seven by 3 gives 21."},
                     ][i % 4])
    rows += rows[: len(rows) // 10]
    rng.shuffle(rows)
    return rows


def write_benchmark(folder: Path, name: str = "times3", count: int = 60) -> Path:
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
    (folder / "times3_raw.json").write_text(json.dumps(raw_rows()), encoding="utf-8")
    print(f"wrote {folder}/times3.yaml, times3.jsonl, times3_raw.json")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
