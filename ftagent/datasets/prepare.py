"""Download (or generate) raw datasets into ``FT_FILE_PATH/datasets/<name>`` exactly once.

Parallel sessions that share ``FT_FILE_PATH`` serialise on a per-dataset file lock; a finished copy
carries a ``.prepared`` marker (JSON), so later calls return at once. Each preparation appends one
line to ``datasets/.prepare_log.jsonl``. Files placed under the path by hand (no marker yet) are
accepted: the post-download hook runs on them and the marker is written.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from filelock import FileLock
from pydantic import BaseModel

from ftagent.core.errors import EnvironmentFailure
from ftagent.core.hub import refuse_offline_resume, require_finished
from ftagent.core.paths import datasets_dir
from ftagent.datasets.base import DatasetSource, read_packaged_readme
from ftagent.datasets.registry import dataset_names, get_source, resolve_dataset_choice

MARKER = ".prepared"
NOTES_FILE = "FTAGENT_NOTES.md"
LOG_FILE = ".prepare_log.jsonl"
LOCK_TIMEOUT_S = 6 * 3600


class PreparedMarker(BaseModel):
    """Written into a prepared dataset folder."""

    name: str
    repo_id: str | None
    source: str  # "hub" | "generated" | "manual"
    prepared_at: float


def dataset_dir(name: str, file_path: Path) -> Path:
    """``FT_FILE_PATH/datasets/<name>``."""
    return datasets_dir(file_path) / name


def is_prepared(name: str, file_path: Path) -> bool:
    """True when the dataset folder carries the ``.prepared`` marker."""
    return (dataset_dir(name, file_path) / MARKER).is_file()


def prepare_dataset(name: str, file_path: Path, *, token: str | None = None, force: bool = False) -> Path:
    """Make ``FT_FILE_PATH/datasets/<name>`` ready (download or generate, hook, notes, marker).

    Args:
        name: a registered dataset name.
        file_path: ``FT_FILE_PATH``.
        token: HF token; default ``$HF_TOKEN`` (then huggingface_hub's own login).
        force: prepare again even when the marker exists.

    Raises:
        UserInputError: unknown dataset name.
        EnvironmentFailure: the hub cannot be reached, the repo is gated, or the download failed.
    """
    source = get_source(name)
    root = datasets_dir(file_path)
    root.mkdir(parents=True, exist_ok=True)
    out = root / name
    with FileLock(str(root / f".{name}.lock"), timeout=LOCK_TIMEOUT_S):
        if (out / MARKER).is_file() and not force:
            return out
        if force and out.exists():
            shutil.rmtree(out)
        kind = _fill(source, out, token if token is not None else os.environ.get("HF_TOKEN"))
        source.post_download(out)
        _write_notes(source, out)
        marker = PreparedMarker(name=name, repo_id=source.spec.repo_id, source=kind, prepared_at=time.time())
        (out / MARKER).write_text(marker.model_dump_json(indent=2), encoding="utf-8")
        with (root / LOG_FILE).open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({"name": name, "source": kind, "pid": os.getpid(), "at": marker.prepared_at}) + "\n")
    return out


def prepare_datasets(names: list[str], file_path: Path, *, token: str | None = None,
                     force: bool = False) -> dict[str, Path]:
    """Prepare several datasets (in order); returns name → folder."""
    return {n: prepare_dataset(n, file_path, token=token, force=force) for n in names}


class DatasetCandidate(BaseModel):
    """A registered dataset as the dataset selection sees it (offline facts only)."""

    name: str
    summary: str = ""
    task_type: str = ""
    related_benchmarks: list[str] = []
    source: str = ""  # HF repo id, or "generated locally"
    notes: str = ""  # the packaged planner notes (excerpt)


def dataset_candidates(note_chars: int = 600) -> list[DatasetCandidate]:
    """Every registered dataset, described from its spec and packaged notes (nothing is downloaded)."""
    out = []
    for name in dataset_names():
        source = get_source(name)
        spec = source.spec
        notes = source.readme() if hasattr(source, "readme") else read_packaged_readme(name)
        out.append(DatasetCandidate(name=name, summary=spec.summary, task_type=spec.task_type,
                                    related_benchmarks=list(spec.related_benchmarks),
                                    source=spec.repo_id or "generated locally", notes=(notes or "")[:note_chars]))
    return out


def selection_is_ambiguous(dataset: str | None, benchmark_key: str | None, related: list[str]) -> bool:
    """True when the rule cannot decide well: no ``--dataset`` and not exactly one related dataset."""
    return not dataset and len(resolve_dataset_choice(None, benchmark_key, related)) != 1


def _fill(source: DatasetSource, out: Path, token: str | None) -> str:
    """Put the raw files into ``out``; returns how ("generated", "manual" or "hub")."""
    if source.spec.repo_id is None:
        staging = out.with_name(f".{out.name}.partial")
        shutil.rmtree(staging, ignore_errors=True)
        source.generate(staging)
        shutil.rmtree(out, ignore_errors=True)
        staging.replace(out)
        return "generated"
    if out.is_dir() and any(p.name != MARKER for p in out.iterdir()):
        return "manual"
    _download(source, out, token)
    return "hub"


def _download(source: DatasetSource, out: Path, token: str | None) -> None:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    repo = source.spec.repo_id
    assert repo is not None, "only hub sources are downloaded (prepare generates the others)"
    staging = out.with_name(f".{out.name}.partial")
    what = f"dataset '{source.spec.name}' (Hugging Face repo {repo})"
    fix = (f"go online (unset HF_HUB_OFFLINE) and run again (the Hub resumes the download into {staging}), or "
           f"place the repo's files under {out} by hand")
    refuse_offline_resume(staging, what, fix)  # offline, the Hub would return the half-download as it is
    try:
        snapshot_download(repo, repo_type="dataset", local_dir=staging, token=token or None,
                          allow_patterns=source.spec.allow_patterns)
    except GatedRepoError as exc:
        raise EnvironmentFailure(_advice(source.spec.name, repo, out, "is gated", exc)) from exc
    except RepositoryNotFoundError as exc:
        raise EnvironmentFailure(_advice(source.spec.name, repo, out, "was not found or needs a token", exc)) from exc
    except Exception as exc:  # offline mode, DNS, proxy, HTTP 5xx ...: all mean "cannot download now"
        raise EnvironmentFailure(_advice(source.spec.name, repo, out, "could not be downloaded", exc)) from exc
    require_finished(staging, what, fix)  # no *.incomplete left and files there: only then it is used
    shutil.rmtree(staging / ".cache", ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    staging.replace(out)


def _advice(name: str, repo: str, out: Path, what: str, exc: Exception) -> str:
    reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
    token = "set HF_TOKEN and accept the dataset's licence on huggingface.co"
    # a failure that is not the Hub's answer about the repo (DNS, proxy, offline, 5xx): the network comes first
    fix = (f"check that huggingface.co can be reached from here (network, proxy) with HF_HUB_OFFLINE unset; if "
           f"the repo needs it, {token}" if what == "could not be downloaded" else token)
    return (f"dataset '{name}' (Hugging Face repo {repo}) {what}: {reason}. Fix: {fix}; or place the repo's files "
            f"under {out} by hand (ftagent then runs its post-download fix and marks it prepared).")


def _write_notes(source: DatasetSource, out: Path) -> None:
    """Our planner notes go next to the original card (the card is never overwritten)."""
    text = source.readme() if hasattr(source, "readme") else read_packaged_readme(source.spec.name)
    if text:
        (out / NOTES_FILE).write_text(text, encoding="utf-8")


__all__ = ["prepare_dataset", "prepare_datasets", "dataset_dir",
           "is_prepared", "dataset_names", "MARKER", "DatasetCandidate", "dataset_candidates",
           "selection_is_ambiguous"]
