"""Downloads of benchmark and dataset files (issue #21): gated repos say what to do, only the files a
benchmark reads are fetched, and an interrupted download is fetched again, never used half-written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ftagent.benchmarks import benchmark_keys, get_benchmark
from ftagent.benchmarks.base import COMPLETE, hub_snapshot, raw_state
from ftagent.benchmarks.domain_adapters import ensure_raw, raw_dir
from ftagent.core.errors import EnvironmentFailure
from ftagent.datasets.registry import get_source

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "benchmarks"


class FakeHub:
    """Stands in for ``huggingface_hub.snapshot_download``: records calls, fails or writes files."""

    def __init__(self, error: Exception | None = None, files: dict[str, str | Path] | None = None) -> None:
        self.calls: list[dict] = []
        self.error, self.files = error, files or {}

    def __call__(self, repo_id=None, *args, **kwargs):
        self.calls.append({"repo_id": repo_id or (args[0] if args else None), **kwargs})
        dest = Path(kwargs["local_dir"])
        (dest / ".cache" / "huggingface" / "download").mkdir(parents=True, exist_ok=True)
        for name, content in self.files.items():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, Path):
                shutil.copy(content, dest / name)
            else:
                (dest / name).write_text(content, encoding="utf-8")
        if self.error is not None:
            raise self.error
        return str(dest)


@pytest.fixture()
def hub(monkeypatch):
    import huggingface_hub

    fake = FakeHub()
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # the fake is a reachable Hub (offline: test_session_faults)
    return fake


def _gated_error():
    from huggingface_hub.errors import GatedRepoError

    exc = GatedRepoError.__new__(GatedRepoError)
    Exception.__init__(exc, "403 Client Error: Cannot access gated repo")
    return exc


def test_a_gated_benchmark_download_names_hf_token_and_the_terms(tmp_path, hub):
    hub.error = _gated_error()
    bench = get_benchmark("chemcotbench_mol_und")
    assert bench.config.data.gated
    with pytest.raises(EnvironmentFailure) as err:
        bench.prepare(tmp_path)
    text = str(err.value)
    assert "HF_TOKEN" in text and "accept its terms" in text
    assert "https://huggingface.co/datasets/OpenMol/ChemCoTBench" in text
    assert not (raw_dir(tmp_path, "chemcotbench_mol_und") / COMPLETE).exists()


def test_a_declared_gated_repo_explains_gating_whatever_the_hub_says(tmp_path, hub):
    hub.error = OSError("401 Unauthorized")
    with pytest.raises(EnvironmentFailure, match="gated.*HF_TOKEN"):
        hub_snapshot("OpenMol/ChemCoTBench", tmp_path / "raw", gated=True)


def test_the_gated_training_dataset_is_declared():
    assert get_source("chemcot").spec.gated


@pytest.mark.parametrize("key", [k for k in benchmark_keys() if k.startswith(("panorama", "bioprobench"))])
def test_domain_keys_download_only_their_test_files(key):
    patterns = get_benchmark(key).config.data.allow_patterns
    assert patterns, key
    for pattern in patterns:
        assert pattern.split("/")[-1].lower().startswith("test") or pattern.endswith("_test.json"), (key, pattern)


def test_panorama_asks_the_hub_for_the_test_split_only(tmp_path, hub):
    hub.files = {"PAR4PC/test.parquet": FIXTURES / "panorama" / "PAR4PC" / "test.parquet"}
    bench = get_benchmark("panorama_par4pc")
    bench.prepare(tmp_path)
    assert hub.calls[0]["allow_patterns"] == ["PAR4PC/test*"] and bench.load_items(tmp_path, "validation")


def test_training_datasets_skip_the_benchmark_files_and_unread_corpora():
    bio = get_source("bioprobench").spec.allow_patterns
    assert bio and not any("test" in p for p in bio) and {"PQA.json", "ORD.json"} <= set(bio)
    assert all("train" in p or p == "README.md" for p in get_source("panorama").spec.allow_patterns)


def test_dataset_download_passes_allow_patterns(tmp_path, hub):
    from ftagent.datasets import prepare

    hub.files = {"PQA.json": "[]"}
    prepare.prepare_dataset("bioprobench", tmp_path)
    assert hub.calls[0]["allow_patterns"] == get_source("bioprobench").spec.allow_patterns


def test_an_interrupted_domain_download_is_fetched_again(tmp_path, hub):
    """Old behaviour: any data file under raw/ counted as done, so a half-finished download was read."""
    raw = raw_dir(tmp_path, "bioprobench_pqa")
    raw.mkdir(parents=True)
    shutil.copy(FIXTURES / "bioprobench" / "PQA_test.json", raw / "PQA_test.json")
    (raw / ".cache" / "huggingface" / "download").mkdir(parents=True)  # the Hub was still at work
    assert raw_state(raw) == "partial"
    bench = get_benchmark("bioprobench_pqa")
    ensure_raw(bench, tmp_path)
    assert len(hub.calls) == 1 and (raw / COMPLETE).is_file()
    ensure_raw(bench, tmp_path)
    assert len(hub.calls) == 1  # complete now: not fetched a third time


def test_files_put_there_by_hand_are_used_and_marked(tmp_path, hub):
    raw = raw_dir(tmp_path, "bioprobench_pqa")
    raw.mkdir(parents=True)
    shutil.copy(FIXTURES / "bioprobench" / "PQA_test.json", raw / "PQA_test.json")
    ensure_raw(get_benchmark("bioprobench_pqa"), tmp_path)
    assert not hub.calls and (raw / COMPLETE).read_text() == "manual\n"


def test_the_marker_is_written_only_after_the_download(tmp_path, hub):
    hub.files, hub.error = {"data/test-0.parquet": "half"}, ConnectionError("reset by peer")
    with pytest.raises(EnvironmentFailure):
        hub_snapshot("nlile/hendrycks-MATH-benchmark", tmp_path / "raw")
    assert raw_state(tmp_path / "raw") == "partial" and not (tmp_path / "raw" / COMPLETE).exists()
    hub.error = None
    hub_snapshot("nlile/hendrycks-MATH-benchmark", tmp_path / "raw")
    assert len(hub.calls) == 2 and raw_state(tmp_path / "raw") == "complete"


def test_an_interrupted_dataset_download_is_never_used(tmp_path, hub):
    """Datasets download into a staging folder that becomes the dataset only when complete."""
    from ftagent.datasets import prepare

    hub.files, hub.error = {"PQA.json": "[]"}, ConnectionError("reset by peer")
    with pytest.raises(EnvironmentFailure):
        prepare.prepare_dataset("bioprobench", tmp_path)
    out = prepare.dataset_dir("bioprobench", tmp_path)
    assert not out.exists() and not prepare.is_prepared("bioprobench", tmp_path)
    hub.error = None
    prepare.prepare_dataset("bioprobench", tmp_path)
    marker = json.loads((out / prepare.MARKER).read_text())
    assert marker["source"] == "hub" and len(hub.calls) == 2


def test_an_unreachable_hub_points_at_the_network_first(tmp_path, hub):
    """Issue 32 (quickstart's gsm8k run without a network): 'ConnectError: Name or service not known. Fix: set
    HF_TOKEN and accept the dataset's licence' sent the user after a token; the network is what to fix."""
    from ftagent.datasets.prepare import _download

    hub.error = OSError("ConnectError: [Errno -2] Name or service not known")
    with pytest.raises(EnvironmentFailure) as err:
        _download(get_source("deepscaler"), tmp_path / "deepscaler", None)
    text = str(err.value)
    assert "could not be downloaded: ConnectError" in text
    assert text.index("huggingface.co can be reached") < text.index("HF_TOKEN"), text
    hub.error = _gated_error()
    with pytest.raises(EnvironmentFailure, match=r"is gated: .*Fix: set HF_TOKEN and accept"):
        _download(get_source("deepscaler"), tmp_path / "deepscaler", None)
