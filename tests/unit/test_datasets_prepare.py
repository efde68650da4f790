"""prepare_dataset: file lock across processes, markers, manual placement, offline errors."""

from __future__ import annotations

import json
import multiprocessing as mp
import shutil
from pathlib import Path

import pytest

from ftagent.core.errors import EnvironmentFailure
from ftagent.datasets.demo_add import DEFAULT_ROWS
from ftagent.datasets.prepare import LOG_FILE, MARKER, is_prepared, prepare_dataset

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "datasets"


def _prepare(file_path: str, barrier) -> None:
    barrier.wait(timeout=30)
    prepare_dataset("demo_add", Path(file_path))


def test_two_processes_prepare_demo_add_once(tmp_path):
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_prepare, args=(str(tmp_path), barrier)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]
    log = (tmp_path / "datasets" / LOG_FILE).read_text().splitlines()
    assert len(log) == 1 and json.loads(log[0])["source"] == "generated"
    assert is_prepared("demo_add", tmp_path)
    rows = json.loads((tmp_path / "datasets/demo_add/demo_add_train.json").read_text())
    assert len(rows) == DEFAULT_ROWS
    assert (tmp_path / "datasets/demo_add/FTAGENT_NOTES.md").is_file()
    prepare_dataset("demo_add", tmp_path)  # already prepared: no new log line
    assert len((tmp_path / "datasets" / LOG_FILE).read_text().splitlines()) == 1


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_OFFLINE", True, raising=False)


def test_offline_download_names_dataset_and_fix(tmp_path, offline_hub):
    with pytest.raises(EnvironmentFailure) as info:
        prepare_dataset("deepscaler", tmp_path / "ft")
    msg = str(info.value)
    assert "deepscaler" in msg and "agentica-org/DeepScaleR-Preview-Dataset" in msg
    assert "HF_TOKEN" in msg and str(tmp_path / "ft" / "datasets" / "deepscaler") in msg
    assert not (tmp_path / "ft/datasets/deepscaler").exists()


def test_manually_placed_files_get_hook_and_marker(tmp_path, offline_hub):
    target = tmp_path / "ft/datasets/bioprobench"
    shutil.copytree(FIXTURES / "bioprobench", target)
    prepare_dataset("bioprobench", tmp_path / "ft")
    assert (target / MARKER).is_file()
    assert not list(target.glob("*_test.json"))
    assert json.loads((target / MARKER).read_text())["source"] == "manual"
    assert (target / "README.md").is_file()  # the original card is kept
