"""The dataset catalogue ``FT_FILE_PATH/datasets/dataset_info.json`` (planner material).

Per dataset: README excerpts, a bounded file tree, tasks (data files grouped by parent folder), row
counts per file and task, per-column token statistics (empty count, min/p50/p90/p99/max) and a few
truncated samples. Building is incremental: a dataset already catalogued with the same token counter
and catalogue version is not analysed again. :func:`render_entry` turns an entry into the Markdown the
planner's prompts show (``detail="full"`` for the data coder, ``"summary"`` for the proposal).
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from filelock import FileLock
from pydantic import BaseModel, Field

from ftagent.datasets.base import read_packaged_readme
from ftagent.datasets.tokens import TokenCounter, load_token_counter

CATALOGUE_FILE = "dataset_info.json"
DATA_SUFFIXES = {".json", ".jsonl", ".parquet", ".csv"}
README_NAMES = {"readme.md", "readme.txt", "ftagent_notes.md"}
MAX_RECORDS = 50_000
README_CHARS = 4000
NOTES_NAME = "ftagent_notes.md"  # ftagent's own notes, copied at prepare time (read fresh from the package)
SAMPLE_CHARS = 2000
TREE_LINES = 120
CATALOGUE_VERSION = 3  # entries written by an older layout (or with stale ftagent notes) are analysed again
LOCK_TIMEOUT_S = 3600  # another session analysing big datasets may hold the catalogue lock for a while


class ColumnStats(BaseModel):
    """Token statistics of one string column."""

    empty_count: int = 0
    min_tokens: int = 0
    max_tokens: int = 0
    p50_tokens: int = 0
    p90_tokens: int = 0
    p99_tokens: int = 0
    values: dict[str, int] = Field(default_factory=dict)  # value -> rows, for a column of few short values


class TaskInfo(BaseModel):
    """Data files sharing one parent folder."""

    files: list[str]
    file_rows: dict[str, int] = Field(default_factory=dict)  # rows read per file (capped at MAX_RECORDS)
    sample_count: int = 0
    column_stats: dict[str, ColumnStats] = Field(default_factory=dict)
    samples: list[dict[str, Any]] = Field(default_factory=list)


class DatasetEntry(BaseModel):
    """One dataset in the catalogue."""

    readme: str = ""
    file_tree: str = ""
    total_samples: int = 0
    total_size_mb: float = 0.0
    tasks: dict[str, TaskInfo] = Field(default_factory=dict)
    token_counter: str = ""
    version: int = 0


def _percentile(sorted_vals: list[int], q: float) -> int:
    """Nearest-rank percentile of a sorted list."""
    if not sorted_vals:
        return 0
    return sorted_vals[min(len(sorted_vals) - 1, max(0, math.ceil(q / 100 * len(sorted_vals)) - 1))]


MAX_CATEGORIES = 12  # a string column with at most this many distinct short values is a category
CATEGORY_CHARS = 40


def column_stats(records: list[dict], counter: TokenCounter) -> dict[str, ColumnStats]:
    """Token statistics for every column holding strings (non-strings are ignored), and the value
    counts of category-like columns (few distinct short values: task types, labels, splits)."""
    lengths: dict[str, list[int]] = defaultdict(list)
    empties: dict[str, int] = defaultdict(int)
    values: dict[str, Counter[str]] = defaultdict(Counter)
    for rec in records:
        for key, value in rec.items():
            if not isinstance(value, str):
                continue
            if not value.strip():
                empties[key] += 1
                lengths.setdefault(key, [])
            else:
                lengths[key].append(counter.count(value))
                if len(value) <= CATEGORY_CHARS and len(values[key]) <= MAX_CATEGORIES:
                    values[key][value] += 1
    stats = {}
    for key in sorted(set(lengths) | set(empties)):
        vals = sorted(lengths[key])
        stats[key] = ColumnStats(empty_count=empties[key], min_tokens=vals[0] if vals else 0,
                                 max_tokens=vals[-1] if vals else 0, p50_tokens=_percentile(vals, 50),
                                 p90_tokens=_percentile(vals, 90), p99_tokens=_percentile(vals, 99),
                                 values=_categories(values.get(key), len(vals)))
    return stats


def _categories(counts: Counter[str] | None, filled: int) -> dict[str, int]:
    """The value counts when every filled row holds one of a few values that repeat, else {}."""
    if not counts or len(counts) > MAX_CATEGORIES or sum(counts.values()) != filled or len(counts) == filled:
        return {}
    return dict(counts.most_common())


def load_records(path: Path, limit: int = MAX_RECORDS) -> list[dict]:
    """Up to ``limit`` records of a .json/.jsonl/.csv/.parquet file (values made JSON-safe)."""
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        out = []
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    out.append(json.loads(line))
                if len(out) >= limit:
                    break
        return [r if isinstance(r, dict) else {"value": r} for r in out]
    if suffix == ".json":
        text = path.read_text(encoding="utf-8").strip()
        try:
            data = json.loads(text)
        except json.JSONDecodeError:  # JSON Lines saved as .json
            data = [json.loads(x) for x in text.splitlines()[:limit] if x.strip()]
        data = data if isinstance(data, list) else [data]
        return [r if isinstance(r, dict) else {"value": r} for r in data[:limit]]
    import pandas as pd

    frame = pd.read_csv(path, nrows=limit) if suffix == ".csv" else pd.read_parquet(path).head(limit)
    return json.loads(frame.to_json(orient="records", force_ascii=False))


def _truncate(value: Any) -> Any:
    if isinstance(value, str) and len(value) > SAMPLE_CHARS:
        return value[:SAMPLE_CHARS] + f"...(omitted {len(value) - SAMPLE_CHARS} chars)"
    if isinstance(value, dict):
        return {k: _truncate(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_truncate(v) for v in value[:20]]
    return value


def file_tree(root: Path, max_lines: int = TREE_LINES) -> str:
    """An indented listing of ``root`` (dot-files skipped, but a user file's ``.user_dataset.json``:
    its default converter reads it), cut after ``max_lines`` lines."""
    from ftagent.datasets.user_file.info import INFO_FILE

    lines: list[str] = []
    paths = sorted(p for p in root.rglob("*") if not any(x.startswith(".") and x != INFO_FILE
                                                         for x in p.relative_to(root).parts))
    for path in paths:
        depth = len(path.relative_to(root).parts) - 1
        size = f" ({path.stat().st_size / 1024:.1f} KiB)" if path.is_file() else "/"
        lines.append("  " * depth + path.name + size)
    if len(lines) > max_lines:
        lines = lines[:max_lines] + [f"... ({len(paths) - max_lines} more entries)"]
    return "\n".join(lines)


def _readmes(root: Path) -> str:
    parts = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if path.is_file() and len(rel.parts) <= 2 and path.name.lower() in README_NAMES:
            text = path.read_text(encoding="utf-8", errors="replace")[:README_CHARS]
            if path.name.lower() == NOTES_NAME and len(rel.parts) == 1:
                text = (read_packaged_readme(root.name) or text)[:README_CHARS]  # our notes: the current text
            parts.append(f"### {rel}\n{text.strip()}")
    return "\n\n".join(parts)


def analyze_dataset(root: Path, counter: TokenCounter) -> DatasetEntry:
    """Analyse one prepared dataset folder."""
    root = Path(root)
    groups: dict[str, list[Path]] = defaultdict(list)
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if (path.is_file() and path.suffix.lower() in DATA_SUFFIXES and path.name != CATALOGUE_FILE
                and not any(x.startswith(".") for x in rel.parts)):  # a LLaMA-Factory registration is no data
            groups[path.parent.name if len(rel.parts) > 1 else "_root"].append(path)
    tasks, size = {}, 0
    for task, files in groups.items():
        records: list[dict] = []
        file_rows: dict[str, int] = {}
        for path in files:
            size += path.stat().st_size
            if len(records) < MAX_RECORDS:
                rows = load_records(path, MAX_RECORDS - len(records))
                file_rows[str(path.relative_to(root))] = len(rows)
                records.extend(rows)
        first = load_records(files[0], 3)
        tasks[task] = TaskInfo(files=[str(p.relative_to(root)) for p in files], file_rows=file_rows,
                               sample_count=len(records), column_stats=column_stats(records, counter),
                               samples=[_truncate(r) for r in first])
    return DatasetEntry(readme=_readmes(root), file_tree=file_tree(root),
                        total_samples=sum(t.sample_count for t in tasks.values()),
                        total_size_mb=round(size / 1024**2, 2), tasks=tasks, token_counter=counter.name,
                        version=CATALOGUE_VERSION)


def build_catalogue(datasets_root: Path, names: list[str] | None = None, *,
                    model_dir: Path | None = None) -> dict[str, DatasetEntry]:
    """Update ``datasets_root/dataset_info.json`` and return it.

    Entries whose folder is gone are dropped; only datasets not yet catalogued (or catalogued with a
    different token counter) are analysed. ``names`` limits which folders are considered (default:
    every sub-folder holding a ``.prepared`` marker or data files).
    """
    root = Path(datasets_root)
    root.mkdir(parents=True, exist_ok=True)
    # several sessions share FT_FILE_PATH: read-modify-write under one lock, so no update is lost
    with FileLock(str(root / f".{CATALOGUE_FILE}.lock"), timeout=LOCK_TIMEOUT_S):
        return _update_catalogue(root, names, model_dir)


def _update_catalogue(root: Path, names: list[str] | None, model_dir: Path | None) -> dict[str, DatasetEntry]:
    path = root / CATALOGUE_FILE
    counter = load_token_counter(model_dir)
    existing: dict[str, DatasetEntry] = {}
    if path.is_file():
        raw = json.loads(path.read_text(encoding="utf-8"))
        existing = {k: DatasetEntry.model_validate(v) for k, v in raw.items() if (root / k).is_dir()}
    wanted = names if names is not None else sorted(
        p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")) if root.is_dir() else []
    for name in wanted:
        entry = existing.get(name)
        stale = entry is None or entry.token_counter != counter.name or entry.version != CATALOGUE_VERSION
        if (root / name).is_dir() and stale:
            existing[name] = analyze_dataset(root / name, counter)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps({k: v.model_dump() for k, v in sorted(existing.items())}, indent=2,
                              ensure_ascii=False), encoding="utf-8")
    tmp.replace(path)
    return existing


_KIND = {"dict": "mapping", "list": "list", "int": "integer", "float": "number", "bool": "boolean",
         "NoneType": "null"}


def read_catalogue(datasets_root: Path) -> dict[str, DatasetEntry]:
    """The entries of ``datasets_root/dataset_info.json`` ({} when it is missing or unreadable)."""
    path = Path(datasets_root) / CATALOGUE_FILE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return {k: DatasetEntry.model_validate(v) for k, v in raw.items()}
    except (OSError, ValueError):
        return {}


def _clip_value(value: Any, limit: int) -> Any:
    """Strings cut to ``limit`` characters (with the number left out), recursively."""
    if isinstance(value, str):
        value = value.split("...(omitted", 1)[0] if "...(omitted" in value else value
        return value if len(value) <= limit else value[:limit] + f"…[+{len(value) - limit} chars]"
    if isinstance(value, dict):
        return {k: _clip_value(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_clip_value(v, limit) for v in value[:5]] + (["…"] if len(value) > 5 else [])
    return value


def _readme_excerpt(readme: str, limit: int) -> str:
    """The README without HTML comments/badges, cut at a line break before ``limit`` characters."""
    text = re.sub(r"<!--.*?-->", "", readme, flags=re.DOTALL)
    text = re.sub(r"(^|\n)---\n.*?\n---\n", r"\1", text, flags=re.DOTALL)  # YAML front matter of HF cards
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith(("![", "<img", "[!["))).strip()
    text = re.sub(r"^#{1,6} +(.+?)\s*#*$", r"**\1**", text, flags=re.MULTILINE)  # no headings inside the entry's
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit("\n", 1)[0]
    return cut + f"\n…(README continues, {len(text) - len(cut)} more characters)"


def _values_text(stats: ColumnStats) -> str:
    if not stats.values:
        return ""
    return "; values " + ", ".join(f"{json.dumps(v, ensure_ascii=False)} {n:,}" for v, n in stats.values.items())


def render_entry(name: str, entry: DatasetEntry, detail: str = "full", *, max_tasks: int = 12,
                 level: int = 2) -> str:
    """Markdown about one dataset for the planner's prompts.

    Args:
        name: the dataset's folder name under ``FT_DATASETS_DIR``.
        entry: its catalogue entry.
        detail: ``"full"`` (data coder: README excerpt, file tree, per-file rows, every column's token
            statistics, 2 sample rows per task) or ``"summary"`` (proposal: counts, columns, one short
            sample, a short README excerpt).
        max_tasks: tasks listed in full; the others are named with their row counts.
        level: heading level of the entry (its parts are one level deeper; README headings deeper still).
    """
    h1, h2 = "#" * level, "#" * (level + 1)
    full = detail == "full"
    readme = _readme_excerpt(entry.readme, 2500 if full else 600) if entry.readme else ""
    lines = [f"{h1} Dataset `{name}`",
             f"- {entry.total_samples:,} rows in {sum(len(t.files) for t in entry.tasks.values())} data file(s), "
             f"{entry.total_size_mb} MB; token counts by `{entry.token_counter or 'unknown'}`"]
    tasks = list(entry.tasks.items())
    for task, info in tasks[:max_tasks]:
        label = "(top level)" if task == "_root" else f"`{task}`"
        lines.append(f"{h2} task {label}: {info.sample_count:,} rows")
        if full:
            file_rows: dict[str, int | None] = dict(info.file_rows) if info.file_rows else dict.fromkeys(info.files)
            for file, rows in file_rows.items():
                lines.append(f"- file `{file}`" + (f": {rows:,} rows" if rows is not None else ""))
        cols = [f"`{c}` (empty {st.empty_count}; tokens p50 {st.p50_tokens}, p90 {st.p90_tokens}, "
                f"p99 {st.p99_tokens}, max {st.max_tokens}{_values_text(st)})" if full
                else f"`{c}` (p50 {st.p50_tokens} tokens{_values_text(st)})"
                for c, st in info.column_stats.items()]
        other = sorted({k for r in info.samples for k, v in r.items()
                        if k not in info.column_stats and not isinstance(v, str)})
        kinds = {k: type(next(r[k] for r in info.samples if k in r)).__name__ for k in other}
        cols += [f"`{k}` ({_KIND.get(kinds[k], kinds[k])})" for k in other]
        if cols:
            lines.append("- columns: " + "; ".join(cols))
        # a row the README excerpt already shows (a user file's stratified samples) is not shown twice (issue 43);
        # the excerpt may show a long row clipped (makeup._clip), so its start is what is looked for
        samples = [r for r in (info.samples[:2] if full else info.samples[:1]) if _compact(r)[:200] not in readme]
        if not samples and info.samples:
            lines.append("- samples: in the README excerpt below")
        for i, sample in enumerate(samples, 1):
            text = json.dumps(_clip_value(sample, 400 if full else 160), ensure_ascii=False)
            cap = 1500 if full else 400
            text = text if len(text) <= cap else text[:cap] + f"…[row continues, +{len(text) - cap} chars]"
            lines.append(f"- sample {i}: {text}")
    if len(tasks) > max_tasks:
        rest = ", ".join(f"{t} ({i.sample_count})" for t, i in tasks[max_tasks:])
        lines.append(f"- {len(tasks) - max_tasks} more tasks: {rest}")
    if full and entry.file_tree:
        tree = entry.file_tree.splitlines()
        shown = tree[:40] + ([f"... ({len(tree) - 40} more lines)"] if len(tree) > 40 else [])
        lines += [f"{h2} Files", "```", *shown, "```"]
    if readme:
        lines += [f"{h2} README (excerpt; it may describe the published dataset: the rows and columns above "
                  "are measured on the files here)", readme]
    return "\n".join(lines)


def _compact(row: dict[str, Any]) -> str:
    """A row as a user file's notes write a sample (:mod:`ftagent.datasets.makeup`): JSON without its empty
    fields, the Alpaca fields first."""
    first = [k for k in ("instruction", "input", "output") if k in row]
    ordered = {k: row[k] for k in [*first, *(k for k in row if k not in first)]}
    return json.dumps({k: v for k, v in ordered.items() if v not in ("", None, [], {})}, ensure_ascii=False,
                      default=str)
