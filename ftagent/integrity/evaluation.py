"""What the candidate was scored on and how it answered: the benchmark's files and ftagent's evaluator sources
unchanged since the session started (``benchmark_files``) and answers that are not (nearly) all the same
(``constant_answers``). The rendered evaluation config is :mod:`ftagent.integrity.eval_config`'s."""

from __future__ import annotations

from pathlib import Path

import ftagent
from ftagent.benchmarks.baselines import answers_nearly_constant
from ftagent.core.types import AnswerProfile
from ftagent.engine.events import CheckVerdict
from ftagent.integrity.hashing import changed_files

#: ftagent's own scorers and evaluation-config renderer (package-relative), hashed with the benchmark data
EVALUATOR_SOURCES = ("benchmarks", "tools/opencompass")


def evaluator_roots() -> list[Path]:
    root = Path(ftagent.__file__).parent
    return [root / rel for rel in EVALUATOR_SOURCES]


def benchmark_files_check(before: dict[str, str] | None, after: dict[str, str]) -> CheckVerdict:
    """Nothing added, removed or edited in the benchmark folder and the evaluator sources."""
    if before is None:
        return CheckVerdict(name="benchmark_files", passed=None, detail="no hashes recorded at the session start")
    changed = changed_files(before, after)
    if changed:
        shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
        return CheckVerdict(name="benchmark_files", passed=False, detail=f"changed since the session started: {shown}")
    return CheckVerdict(name="benchmark_files", passed=True,
                        detail=f"{len(after)} benchmark and evaluator files unchanged since the session started")


def profile_predictions(profile: AnswerProfile) -> list[str]:
    """The answers an :class:`AnswerProfile` stands for: its repeated answers with their counts, every other
    answer distinct (the profile keeps only the repeated ones)."""
    repeated = [answer for answer, n in profile.top.items() for _ in range(n)]
    return repeated + [f"\x00distinct {i}" for i in range(max(0, profile.items - len(repeated)))]


def constant_answers_check(profile: AnswerProfile | None) -> CheckVerdict:
    if profile is None or not profile.items:
        return CheckVerdict(name="constant_answers", passed=None, detail="no validation answers read")
    flagged = answers_nearly_constant(profile_predictions(profile))
    top = max(profile.top.values(), default=1)
    return CheckVerdict(name="constant_answers", passed=not flagged,
                        detail=f"the most frequent answer is {top} of {profile.items}"
                                 + (" (nearly constant)" if flagged else ""))

