"""The parity harness: the same model outputs scored by ftagent and by the field's reference.

Every test in ``tests/parity`` scores one corpus of realistic model outputs (``corpora/*.json``) twice:
with ftagent's own scoring path and with the reference (stock OpenCompass's post-processor and
evaluator from the tool env's installed ``opencompass``, or a benchmark's official scoring code), and
hands both per-output scores to :meth:`ParityTable.record`. A disagreement fails the test unless it is
listed as *deliberate* with the reason ftagent's answer is more correct (docs/benchmarks.md lists them).

``make parity`` runs this folder and prints one agreement table (``pytest_terminal_summary`` in
``conftest.py``); with ``FTAGENT_PARITY_TABLE=<file.md>`` the table is also written there.

Scores are per output: ``bool`` (correct or not) or ``float`` (a per-item metric); two scores agree
when they are equal within ``tol``.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CORPORA = HERE / "corpora"
REPO = HERE.parent.parent


@dataclass
class ParityRow:
    """One benchmark's agreement: counts, the disagreements and which of them are deliberate."""

    benchmark: str
    reference: str
    n: int
    agree: int
    deliberate: dict[int, str] = field(default_factory=dict)
    disagreements: list[int] = field(default_factory=list)
    ours_total: float = 0.0
    ref_total: float = 0.0

    @property
    def unexplained(self) -> list[int]:
        return [i for i in self.disagreements if i not in self.deliberate]

    @property
    def agreement(self) -> float:
        return 100.0 * self.agree / max(self.n, 1)


def _same(a: Any, b: Any, tol: float) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a == b
    fa, fb = float(a), float(b)
    if math.isnan(fa) and math.isnan(fb):
        return True
    return abs(fa - fb) <= tol


class ParityTable:
    """Collects one :class:`ParityRow` per recorded benchmark for the session's summary table."""

    def __init__(self) -> None:
        self.rows: list[ParityRow] = []

    def record(self, benchmark: str, reference: str, outputs: Sequence[str], ours: Sequence[Any],
               theirs: Sequence[Any], *, deliberate: dict[int, str] | None = None,
               tol: float = 1e-9) -> ParityRow:
        """Compare per-output scores; return the row (the caller asserts ``row.unexplained == []``).

        Args:
            benchmark: the ftagent benchmark key (or ``key/subtask``).
            reference: what scored ``theirs``: e.g. ``"stock OC mmlu_gen_4d595a: first_option_postprocess +
                AccEvaluator"`` or ``"official LGAI-Research/PANORAMA:benchmarks/par4pc/eval.py"``.
            outputs: the model outputs (same order as the scores).
            ours / theirs: per-output scores (bool or float).
            deliberate: output index → why ftagent scores it differently on purpose.
            tol: float tolerance for float scores.
        """
        if not (len(outputs) == len(ours) == len(theirs)):
            raise ValueError(f"{benchmark}: {len(outputs)} outputs, {len(ours)} ours, {len(theirs)} theirs")
        diffs = [i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if not _same(a, b, tol)]
        row = ParityRow(benchmark=benchmark, reference=reference, n=len(outputs), agree=len(outputs) - len(diffs),
                        deliberate={i: why for i, why in (deliberate or {}).items() if i in diffs},
                        disagreements=diffs, ours_total=sum(float(x) for x in ours),
                        ref_total=sum(float(x) for x in theirs))
        self.rows.append(row)
        return row

    def explain(self, row: ParityRow, outputs: Sequence[str], ours: Sequence[Any], theirs: Sequence[Any]) -> str:
        """A readable list of the unexplained disagreements (for assertion messages)."""
        return "\n".join(f"  #{i}: ours={ours[i]!r} reference={theirs[i]!r} output={outputs[i][:200]!r}"
                         for i in row.unexplained)

    def markdown(self) -> str:
        """The agreement table (Markdown), one line per benchmark."""
        lines = ["| benchmark | reference | outputs | agree | agreement | deliberate differences |",
                 "|---|---|---|---|---|---|"]
        for r in sorted(self.rows, key=lambda r: r.benchmark):
            why = "; ".join(f"#{i}: {w}" for i, w in sorted(r.deliberate.items())) or "none"
            lines.append(f"| {r.benchmark} | {r.reference} | {r.n} | {r.agree} | {r.agreement:.1f} % | {why} |")
        return "\n".join(lines)


def load_corpus(name: str) -> list[dict[str, Any]]:
    """``corpora/<name>.json``: a list of ``{"output": str, "gold": ..., "style": str, ...}`` cases."""
    return json.loads((CORPORA / f"{name}.json").read_text(encoding="utf-8"))


def run_in_tools(python: Path, script: Path, payload: Any, timeout: float = 600) -> Any:
    """Run ``script`` with the tool env's ``python`` (JSON ``payload`` on stdin, JSON on stdout's last line).

    The tool env holds the stock ``opencompass``; ftagent's own OpenCompass extension
    (``ftagent.tools.opencompass.oc_ext``) is importable there through ``PYTHONPATH`` = the repository,
    exactly as rendered configs import it.
    """
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([str(python), str(script)], input=json.dumps(payload), capture_output=True,
                          text=True, env=env, timeout=timeout, cwd=str(REPO))
    if proc.returncode != 0:
        raise RuntimeError(f"{script.name} failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def publish_reference(reference: Path, data: Any) -> int:
    """Print the official scores as JSON and, with ``--write`` on the command line, store them at
    ``reference`` (the recompute scripts ``official_*.py`` end here); returns the exit code 0."""
    import sys

    text = json.dumps(data, indent=1, ensure_ascii=False) + "\n"
    if "--write" in sys.argv:
        reference.parent.mkdir(exist_ok=True)
        reference.write_text(text, encoding="utf-8")
    print(text)
    return 0
