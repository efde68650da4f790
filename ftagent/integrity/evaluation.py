"""What the candidate was scored on and how it answered: the benchmark's files and ftagent's evaluator sources
unchanged since the session started (``benchmark_files``), the rendered evaluation config equal to the
baseline's (``eval_config``), and answers that are not (nearly) all the same (``constant_answers``)."""

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


def _datasets_block(path: Path) -> tuple[str, str]:
    """(the header lines, the config up to ``models = [``) of a rendered OpenCompass config."""
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.splitlines()
    return "\n".join(lines[:2]), text.split("\nmodels = [", 1)[0]


def eval_config_check(candidate_oc: Path, baseline_oc: Path) -> CheckVerdict:
    """The candidate was scored with the baseline's datasets, prompts and evaluators (see the module doc)."""
    compared, differs = 0, []
    for cfg in sorted(Path(candidate_oc).glob("oc_*.py")):
        ref = Path(baseline_oc) / cfg.name
        if not ref.is_file():
            continue
        (c_head, c_body), (r_head, r_body) = _datasets_block(cfg), _datasets_block(ref)
        if c_head != r_head:  # another template version (ftagent upgraded since a cached baseline)
            continue
        compared += 1
        if c_body != r_body:
            differs.append(cfg.name)
    if differs:
        return CheckVerdict(name="eval_config", passed=False,
                            detail=f"{', '.join(differs)}: datasets, prompts or evaluators differ from the baseline's")
    if not compared:
        return CheckVerdict(name="eval_config", passed=None, detail="no rendered config to compare (cached)")
    return CheckVerdict(name="eval_config", passed=True,
                        detail=f"{compared} rendered evaluation config(s) equal the baseline's but for the model")



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

