"""Issue 32 item 6: a hub model that cannot be fetched is found at start-up, before any dataset.

Before: ``prepare()`` prepared (downloaded) the datasets first and found the model afterwards, and an
offline, uncached hub id ended with exit 1 (EnvironmentFailure) instead of the 2 the README promises for
a missing model.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftagent.core.errors import EnvironmentFailure
from ftagent.models.download import offline_unfetchable
from tests.helpers.weights import safetensors_bytes


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FT_", "CHAT_", "OPENAI_", "HF_"))}
    env.update(FT_FILE_PATH=str(tmp_path / "ft"), LOG_PATH=str(tmp_path / "log"),
               WORKSPACE_PATH=str(tmp_path / "ws"), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1",
               FT_PLANNER="heuristic")
    return env


def test_offline_uncached_hub_model_is_exit_2_before_any_dataset(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "ftagent", "llm_finetune", "--benchmark", "demo_add",
                          "--base-model", "nobody-here/no-such-model", "--loop-n", "1"],
                         cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert res.returncode == 2, res.stderr[-2000:]
    assert "nobody-here/no-such-model" in res.stderr and "HF_HUB_OFFLINE" in res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "ft" / "datasets").exists()  # no dataset prepared
    assert not (tmp_path / "log").exists() or not any((tmp_path / "log").iterdir())  # no session


def test_offline_is_fine_for_a_model_already_in_its_folder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert offline_unfetchable("org/m", tmp_path) is not None
    folder = tmp_path / "models" / "org" / "m"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(safetensors_bytes(b"x"))
    assert offline_unfetchable("org/m", tmp_path) is None
    assert offline_unfetchable("builtin/tiny-qwen2", tmp_path) is None
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert offline_unfetchable("org/other", tmp_path) is None  # online: the download decides


def test_prepare_resolves_the_model_before_the_datasets(tmp_path: Path, monkeypatch) -> None:
    """Online, a model whose download fails stops the start before any dataset download."""
    import ftagent.datasets.prepare as prep
    import ftagent.models.base_model as base_model
    from ftagent.core.settings import load_settings
    from ftagent.finetune.resolve import resolve_run
    from ftagent.finetune.scenario import FinetuneScenario

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("FT_FILE_PATH", str(tmp_path / "ft"))
    monkeypatch.setenv("FT_PLANNER", "heuristic")
    calls: list[str] = []

    def no_model(*_a, **_k):
        calls.append("model")
        raise EnvironmentFailure("base model 'org/m' cannot be downloaded")

    def datasets(*_a, **_k):
        calls.append("datasets")
        return {}

    monkeypatch.setattr(base_model, "fetch_base_model", no_model)
    monkeypatch.setattr(prep, "prepare_datasets", datasets)
    settings = load_settings(target_benchmark="demo_add", base_model="org/m")
    run = resolve_run(settings)
    with pytest.raises(EnvironmentFailure):
        FinetuneScenario(settings, runner=None, emit=lambda _e: None, run=run).prepare()
    assert calls == ["model"]
