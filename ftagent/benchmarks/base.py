"""The benchmark adapter contract: a pydantic :class:`BenchmarkSpec` plus the :class:`BenchmarkAdapter` Protocol.

An adapter knows where a benchmark's data comes from, how to prepare it into
``FT_FILE_PATH/benchmarks/<key>/{validation,test}.jsonl``, how to read items, and how to render the
OpenCompass dataset block (prompt, answer post-processing, evaluator) for the config template.
Built-in and user benchmarks are YAML files turned into :class:`ftagent.benchmarks.adapter.Benchmark`;
a plug-in may register any object with this interface. File helpers (JSONL, tables, Hub snapshots) too.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from ftagent.core.hub import HF_DOWNLOAD_CACHE, refuse_offline_resume, require_finished, unfinished_files

Split = Literal["validation", "test", "full"]
# "full": every item outside validation (test + the rows in neither split), the final evaluation's set
# (FT_FINAL_EVAL=full, ``ftagent eval --split full``); like test, never shown to an LLM
PREPARED_SPLITS = ("validation", "test", "full")


class BenchmarkSpec(BaseModel):
    """Static facts about one benchmark (what ``ftagent benchmarks show`` prints)."""

    key: str
    category: str
    description: str = ""
    data_source: str  # "bundled" or an HF dataset repo id
    related_datasets: list[str] = Field(default_factory=list)  # training dataset names
    prompt: str  # OpenCompass prompt with {column} placeholders
    answer_rule: str  # one line: how predictions are post-processed and compared
    evaluator: str  # dotted OpenCompass evaluator name
    core_metric: str = "accuracy"
    direction: Literal["max", "min"] = "max"
    max_out_len: int = 512
    input_columns: list[str] = Field(default_factory=lambda: ["question"])
    output_column: str = "answer"
    subsets: list[str] = Field(default_factory=lambda: ["default"])

    def describe_line(self) -> str:
        """One line: key, category, core metric, direction (under :data:`DESCRIBE_HEADER`)."""
        return _LINE.format(self.key, self.category, f"{self.core_metric} ({self.direction})")


_LINE = "{:<16} {:<10} {}"
DESCRIBE_HEADER = _LINE.format("KEY", "CATEGORY", "METRIC (DIRECTION)")  # the columns of describe_line


class DatasetBlock(BaseModel):
    """What the OpenCompass config template needs for one (sub-)dataset of one split."""

    abbr: str
    path: str  # absolute JSONL path
    input_columns: list[str]
    output_column: str
    rounds: list[dict[str, str]]  # [{"role": "HUMAN", "prompt": "..."}] (few-shot turns included)
    max_out_len: int
    evaluator: str  # "@Name" (ftagent's, components.PROVIDED) or "module:Class"; the renderer imports it
    postprocessor: str | None = None  # the same forms; None = the raw output
    postprocessor_kwargs: dict[str, Any] = Field(default_factory=dict)
    evaluator_kwargs: dict[str, Any] = Field(default_factory=dict)
    judge: dict[str, str] | None = None  # LLM judge for rule misses (aime25), None = off
    # issue 40, the sampling step's training prompts only: how the gold column is read before scoring
    # (OpenCompass eval_cfg dataset_postprocessor; "@Name" or "module:Name"); None = as written (every benchmark)
    reference_postprocessor: str | None = None
    reference_postprocessor_kwargs: dict[str, Any] = Field(default_factory=dict)


@runtime_checkable
class BenchmarkAdapter(Protocol):
    """What every benchmark adapter provides (built-in or registered through entry points)."""

    spec: BenchmarkSpec

    def prepare(self, root: Path, *, limit: int | None = None) -> Path:
        """Write ``root/<key>/{validation,test}.jsonl`` (per subset) and return ``root/<key>``."""
        ...

    def load_items(self, root: Path, split: Split) -> list[dict[str, Any]]:
        """The prepared items of ``split`` (all subsets), each with a ``subset`` field."""
        ...

    def dataset_blocks(self, root: Path, split: Split, *, judge: dict[str, str] | None = None
                       ) -> list[DatasetBlock]:
        """The OpenCompass dataset blocks for ``split`` (one per non-empty subset)."""
        ...


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    """Write rows as JSON Lines (UTF-8, one object per line), atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")  # sessions share FT_FILE_PATH
    with tmp.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    tmp.replace(path)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Read a JSON Lines file (empty lines skipped)."""
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


SOURCE_KEY = "__source__"  # a loader's note of where a row came from ("<file>, row N"); popped before items are built
COMPLETE = ".complete"  # written into a benchmark's raw/ folder last, after every file is there


def raw_state(dest: Path) -> Literal["complete", "partial", "manual", "empty"]:
    """What a raw folder holds: a finished download (marker), an interrupted one (the Hub's download
    cache but no marker), files put there by hand (neither), or nothing."""
    if (dest / COMPLETE).is_file() and not unfinished_files(dest):
        return "complete"
    if not dest.is_dir():
        return "empty"
    if (dest / HF_DOWNLOAD_CACHE).exists():
        return "partial"
    files = [p for p in dest.rglob("*") if p.is_file() and not p.name.startswith(".")]
    return "manual" if files else "empty"


def _hub_advice(repo_id: str, dest: Path, gated: bool, exc: Exception) -> str:
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    cause = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''}"
    if gated or isinstance(exc, (GatedRepoError, RepositoryNotFoundError)):
        fix = (f"the dataset is gated: log in on huggingface.co, accept its terms at "
               f"https://huggingface.co/datasets/{repo_id}, and set HF_TOKEN to a token of that account")
    else:
        fix = "go online (unset HF_HUB_OFFLINE)"
    return (f"cannot download benchmark data '{repo_id}' from the Hugging Face Hub ({cause}). Fix: {fix}; or copy "
            f"the files into {dest} and create {COMPLETE} there.")


def hub_snapshot(repo_id: str, dest: Path, allow_patterns: list[str] | None = None, *, gated: bool = False) -> Path:
    """Download an HF dataset repo snapshot into ``dest``; reused only once complete.

    The :data:`COMPLETE` marker is written last, so an interrupted download is fetched again (the Hub
    resumes it) and never read half-written. ``allow_patterns`` limits the download to the files the
    benchmark reads. ``HF_TOKEN`` (environment) authenticates, which gated repos need.

    Raises:
        EnvironmentFailure: the Hub cannot be reached (offline mode, no network) or refuses (gated repo);
            the message says how to fix it.
    """
    from ftagent.core.errors import EnvironmentFailure

    marker = dest / COMPLETE
    if marker.exists() and not unfinished_files(dest):
        return dest
    marker.unlink(missing_ok=True)  # marked by an older ftagent over a half-download: not complete
    what = f"benchmark data '{repo_id}'"
    fix = (f"go online (unset HF_HUB_OFFLINE) and run again (the Hub resumes the download), or copy every file "
           f"of the repo into {dest} and create {COMPLETE} there")
    refuse_offline_resume(dest, what, fix)  # offline, the Hub would return the half-download as it is
    try:
        from huggingface_hub import snapshot_download

        snapshot_download(repo_id=repo_id, repo_type="dataset", local_dir=str(dest),
                          allow_patterns=allow_patterns, token=os.environ.get("HF_TOKEN") or None)
    except Exception as exc:  # offline, DNS, gated repo ... all end the same way
        raise EnvironmentFailure(_hub_advice(repo_id, dest, gated, exc)) from exc
    require_finished(dest, what, fix)  # no *.incomplete left and files there: only then the marker
    marker.write_text("ok\n", encoding="utf-8")
    return dest


def read_table(path: Path) -> list[dict[str, Any]]:
    """Rows of a .jsonl, .json (list or id-keyed object), .csv or .parquet file."""
    import csv

    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return read_jsonl(path)
    if suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict):
            return [{"id": k, **v} for k, v in data.items()]
        return list(data)
    if suffix == ".csv":
        with path.open(encoding="utf-8", newline="") as fh:
            return list(csv.DictReader(fh))
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    raise ValueError(f"unsupported data file {path}")
