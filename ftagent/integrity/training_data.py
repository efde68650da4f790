"""What the loop trained on: the data script's sandbox recorded no read of a folder it must not read
(``data_script``, :mod:`ftagent.runners.decoys`; its text naming the benchmark is only a warning), and the training rows hold no validation or test item, copied, paraphrased or as a
copied gold answer (``contamination``)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ftagent.core.trace import Experiment
from ftagent.engine.events import CheckVerdict

DATA_SCRIPT = "process_data.py"
DATA_FILE = "data.json"
_DENIED = re.compile(r"No such file or directory|Permission denied|Read-only file system")


def _text_warnings(script: Path, log_dirs: list[Path], data_dir: Path, benchmark: str) -> list[str]:
    """What the script's text and logs say about the benchmark folder: warnings only (issue 39 item 7: an
    honest comment naming ``benchmarks/<key>`` was flagged; a split string, a glob, a read of the baseline's
    saved predictions were missed)."""
    text = script.read_text(encoding="utf-8", errors="replace")
    named = re.compile(re.escape(str(data_dir)) + "|" + re.escape(str(data_dir.parent)) + "|benchmarks['\"]?\\s*"
                       r"[,/+]\s*(?:os\.sep\s*\+\s*)?['\"/]?" + re.escape(benchmark) + r"\b")
    out = []
    found = named.search(text)
    if found:
        out.append(f"{DATA_SCRIPT} names the benchmark folder ({found.group(0)!r})")
    for log in sorted(p for folder in log_dirs for p in folder.glob("process_data*.log")):
        for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
            if _DENIED.search(line) and (str(data_dir) in line or f"benchmarks/{benchmark}" in line):
                out.append(f"{log.name} prints a failed read naming the benchmark folder")
                break
    return out


def data_script_check(workspace: Path, data_dir: Path, benchmark: str, *, code_dir: Path | None = None,
                      data_run: Path | None = None) -> CheckVerdict:
    """Flagged only by the sandbox's own record: the data script opened a decoy of a folder it must not read
    (benchmark items, saved predictions, logs; :mod:`ftagent.runners.decoys`). What its text or logs say
    about the benchmark folder is a warning in the detail, never a flag: the sandbox, not a pattern, is the
    guarantee (those folders are not visible to the script).

    ``code_dir``: the script as validation froze it (what ran; default the workspace's copy); ``data_run``: the
    full data run's own folder (its log and its recorded reads; :mod:`ftagent.core.approved`).
    """
    from ftagent.runners.decoys import read_attempts

    workspace, data_dir = Path(workspace), Path(data_dir)
    script = Path(code_dir or workspace) / DATA_SCRIPT
    if not script.is_file():
        return CheckVerdict(name="data_script", passed=None, detail="no generated data script")
    runs = [workspace, *([Path(data_run)] if data_run is not None else [])]
    warnings = _text_warnings(script, [run / "logs" for run in runs], data_dir, benchmark)
    note = f" (warning, not a flag: {'; '.join(warnings)})" if warnings else ""
    records = [r for r in (read_attempts(run) for run in runs) if r is not None]
    record = {run: found for r in records for run, found in r.items()} if records else None
    if record is None:
        return CheckVerdict(name="data_script", passed=None,
                            detail=f"no sandbox record: the data script ran without bubblewrap's decoys{note}")
    attempts = [f"{run}: {a}" for run, found in record.items() for a in found]
    if attempts:
        shown = "; ".join(attempts[:3]) + (f" and {len(attempts) - 3} more" if len(attempts) > 3 else "")
        return CheckVerdict(name="data_script", passed=False,
                            detail=f"the sandbox recorded reads outside the workspace: {shown}{note}")
    return CheckVerdict(name="data_script", passed=True,
                        detail=f"the sandbox recorded no read of benchmark items, saved predictions or logs{note}")


def _read_rows(path: Path) -> list[dict[str, Any]] | None:
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else None


def benchmark_items(data_dir: Path, input_columns: list[str]) -> dict[str, list[str]]:
    """The validation and test items' input fields, keyed ``<folder>/<split>:<index>`` as the data step's scan
    keys them (:func:`ftagent.tools.llamafactory.data_script.keyed_items`)."""
    from ftagent.benchmarks.base import read_jsonl

    out: dict[str, list[str]] = {}
    for split in ("validation", "test"):
        for path in sorted(Path(data_dir).glob(f"**/{split}.jsonl")):
            for i, row in enumerate(read_jsonl(path)):
                out[f"{path.parent.name}/{split}:{i}"] = [str(row.get(f, "")) for f in input_columns]
    return out


def benchmark_answers(data_dir: Path, answer_field: str = "answer") -> dict[str, str]:
    """The gold answers of the validation and test items, keyed like :func:`benchmark_items`."""
    from ftagent.benchmarks.frozen import scan_answers

    return scan_answers(Path(data_dir), answer_field)


def trained_system_texts(experiment: Experiment) -> tuple[str, ...]:
    """The ``default_system`` of the config the loop trained with: validation's frozen train.yaml (written by
    ftagent, outside any sandbox) and the experiment's recorded config. LLaMA-Factory's template renders it in
    every training prompt whose row has no ``system`` (llamafactory/data/template.py ``Template._encode``:
    ``system or self.default_system``) and, for a template that writes its Jinja, in every evaluation prompt."""
    import yaml

    configs = [dict(experiment.config or {})]
    approved = experiment.approved
    if approved is not None and approved.config_path.is_file():
        try:
            configs.append(yaml.safe_load(approved.config_path.read_text(encoding="utf-8")) or {})
        except (OSError, yaml.YAMLError):
            pass
    found = [str(c.get("default_system") or "") for c in configs if isinstance(c, dict)]
    return tuple(dict.fromkeys(t for t in found if t))


def contamination_check(data_file: Path, items: dict[str, list[str]], answers: dict[str, str], *,
                        system_texts: tuple[str, ...] = ()) -> CheckVerdict:
    """The loop's training rows hold no validation/test item: copied, reworded (numbers and gold), paraphrased, or
    its answer copied; they answer no large share of a small templated input space; and ``system_texts`` (the
    validated train.yaml's ``default_system``, in every training and evaluation prompt) hold no item."""
    from ftagent.datasets.contamination import (
        ANSWER_COVERAGE,
        ANSWER_MIN_TOKENS,
        fuzzy_scan,
        normalise,
        scan_rows,
        scan_system_texts,
    )
    from ftagent.datasets.trained_text import trained_row

    rows = _read_rows(Path(data_file))
    if rows is None:
        return CheckVerdict(name="contamination", passed=None, detail=f"no readable {Path(data_file).name}")
    if not items:
        return CheckVerdict(name="contamination", passed=None, detail="no benchmark items to compare")
    exact = scan_rows(rows, items, answers=answers)
    fuzzy = fuzzy_scan(rows, items)
    long_answers = {k: v for k, v in answers.items() if len(normalise(v)) >= ANSWER_MIN_TOKENS}
    trained_answers = [{"output": "\n".join(a for t in trained_row(r).turns for a in t.answers)} for r in rows]
    copied = scan_rows(trained_answers, long_answers, min_coverage=ANSWER_COVERAGE) if long_answers else None
    parts = [(exact, "hold items"), (fuzzy, "paraphrase items"), (copied, "copy gold answers")]
    found = [f"{rep.flagged_rows} rows {what} (e.g. row {rep.flagged[0].row_index} ~ {rep.flagged[0].item_id})"
             for rep, what in parts if rep is not None and rep.flagged]
    found += [flag.words() for flag in exact.spaces]
    found += [f"train.yaml's default_system holds benchmark item {o.item_id}"
              for o in scan_system_texts(system_texts, items, answers)]
    if found:
        return CheckVerdict(name="contamination", passed=False, detail="; ".join(found))
    return CheckVerdict(name="contamination", passed=True,
                        detail=f"{len(rows):,} rows vs {len(items):,} items: none copied, reworded, paraphrased or "
                               f"answer-copied; no input space covered"
                               + ("; default_system holds no item" if any(system_texts) else ""))
