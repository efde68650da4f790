"""A hub base model is downloaded without what no loader reads (issue 30, finding 11c).

``snapshot_download`` without ``allow_patterns`` pulled Llama's ``original/*.pth`` (+16 GB) and
every duplicate weight format. The repo listings below are the real ones' shapes (file names from
meta-llama/Llama-3.1-8B-Instruct, mistralai/Mistral-7B-Instruct-v0.3 and a .bin-only repo); the
fake hub filters them with huggingface_hub's own ``filter_repo_objects``, as ``snapshot_download`` does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ftagent.core.errors import EnvironmentFailure, UserInputError
from ftagent.models import download

LLAMA = [".gitattributes", "LICENSE", "README.md", "USE_POLICY.md", "config.json", "generation_config.json",
         "model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
         "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors", "model.safetensors.index.json",
         "original/consolidated.00.pth", "original/params.json", "original/tokenizer.model",
         "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json",
         "pytorch_model.bin", "pytorch_model.bin.index.json"]  # the last two added: both formats present
MISTRAL = ["config.json", "consolidated.safetensors", "generation_config.json", "model-00001-of-00003.safetensors",
           "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors", "model.safetensors.index.json",
           "params.json", "special_tokens_map.json", "tokenizer.json", "tokenizer.model", "tokenizer.model.v3",
           "tokenizer_config.json"]
BIN_ONLY = ["config.json", "pytorch_model.bin", "tokenizer.model", "tokenizer_config.json", "README.md"]
REMOTE_CODE = ["config.json", "configuration_foo.py", "modeling_foo.py", "tokenization_foo.py", "qwen.tiktoken",
               "model.safetensors", "chat_template.jinja", "vocab.txt"]


class FakeHub:
    """``snapshot_download`` over a fixed repo listing, filtered by huggingface_hub's own matcher."""

    def __init__(self, listing: list[str]) -> None:
        self.listing = listing
        self.calls: list[dict] = []

    def __call__(self, *, repo_id, local_dir, allow_patterns=None, ignore_patterns=None, **_kw):
        from huggingface_hub.utils import filter_repo_objects

        self.calls.append({"allow": allow_patterns, "ignore": ignore_patterns})
        for name in filter_repo_objects(self.listing, allow_patterns=allow_patterns, ignore_patterns=ignore_patterns):
            path = Path(local_dir) / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(name)
        return local_dir


def _fetched(listing: list[str], tmp_path: Path, monkeypatch) -> tuple[list[str], FakeHub]:
    import huggingface_hub

    hub = FakeHub(listing)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", hub)
    out = download._download("org/model", tmp_path / "m")
    return sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()), hub


def test_llama_gets_safetensors_and_configs_not_pth_nor_bin(tmp_path: Path, monkeypatch) -> None:
    files, hub = _fetched(LLAMA, tmp_path, monkeypatch)
    assert files == ["config.json", "generation_config.json", "model-00001-of-00004.safetensors",
                     "model-00002-of-00004.safetensors", "model-00003-of-00004.safetensors",
                     "model-00004-of-00004.safetensors", "model.safetensors.index.json",
                     "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"]
    assert not any(f.endswith((".pth", ".bin")) or f.startswith("original/") for f in files)
    assert len(hub.calls) == 1  # safetensors came: no second pass


def test_mistral_skips_the_consolidated_duplicate(tmp_path: Path, monkeypatch) -> None:
    files, _ = _fetched(MISTRAL, tmp_path, monkeypatch)
    assert "consolidated.safetensors" not in files
    assert {"model-00001-of-00003.safetensors", "tokenizer.model", "tokenizer.json", "params.json"} <= set(files)


def test_bin_only_repo_gets_its_bin(tmp_path: Path, monkeypatch) -> None:
    files, hub = _fetched(BIN_ONLY, tmp_path, monkeypatch)
    assert files == ["config.json", "pytorch_model.bin", "tokenizer.model", "tokenizer_config.json"]
    assert len(hub.calls) == 2


def test_remote_code_repo_gets_its_python_and_tokenizer_files(tmp_path: Path, monkeypatch) -> None:
    files, _ = _fetched(REMOTE_CODE, tmp_path, monkeypatch)
    assert files == sorted(REMOTE_CODE)


def test_a_repo_without_loadable_weights_is_a_user_error(tmp_path: Path, monkeypatch) -> None:
    with pytest.raises(UserInputError, match="org/model.*no safetensors"):
        _fetched(["config.json", "model-q4.gguf", "original/consolidated.00.pth"], tmp_path, monkeypatch)
    assert not (tmp_path / "m").exists()  # nothing half-made is left


def test_download_failure_is_still_one_environment_failure(tmp_path: Path, monkeypatch) -> None:
    import huggingface_hub

    def failing(**_kwargs):
        raise OSError("no network")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", failing)
    with pytest.raises(EnvironmentFailure, match="cannot be downloaded"):
        download._download("org/m", tmp_path / "m")


def test_a_download_that_brings_nothing_is_an_environment_failure(tmp_path: Path, monkeypatch) -> None:
    with pytest.raises(EnvironmentFailure, match="no config.json"):
        _fetched([], tmp_path, monkeypatch)


def _hub_answered(cls, message: str) -> Exception:
    """A huggingface_hub HTTP error as the Hub's answer raises it (built without a live response object)."""
    err = cls.__new__(cls)
    OSError.__init__(err, message)
    return err


@pytest.mark.parametrize("name, says", [("RepositoryNotFoundError", "has no such model"),
                                        ("GatedRepoError", "says it is gated: accept its terms")])
def test_a_repo_the_hub_does_not_have_is_bad_input_exit_2(tmp_path: Path, monkeypatch, name, says) -> None:
    """Issue 32 (README: a missing model exits 2): the Hub answered that the id does not exist (or is gated),
    so the id is what to fix, not the network; an unreachable Hub stays an environment failure (exit 1)."""
    import huggingface_hub
    import huggingface_hub.errors

    error = _hub_answered(getattr(huggingface_hub.errors, name), "404 Client Error. Repository Not Found")

    def answered(**_kwargs):
        raise error

    monkeypatch.setattr(huggingface_hub, "snapshot_download", answered)
    with pytest.raises(UserInputError, match=f"base model 'org/nope': the Hugging Face Hub {says}"):
        download._download("org/nope", tmp_path / "m")
    assert not (tmp_path / "m").exists()


def test_a_failed_download_leaves_no_lock_file_nor_an_empty_org_folder(tmp_path: Path, monkeypatch) -> None:
    """Issue 32: a failed Hub download left an empty ``models/ORG/.NAME.lock`` (and ``models/ORG/``) for good;
    a successful one leaves only the model folder."""
    import huggingface_hub

    def failing(**_kwargs):
        raise OSError("no network")

    models = tmp_path / "models"
    models.mkdir()
    monkeypatch.setattr(huggingface_hub, "snapshot_download", failing)
    with pytest.raises(EnvironmentFailure, match="cannot be downloaded"):
        download.download_once("Qwen/Qwen2.5-7B-Instruct", models / "Qwen" / "Qwen2.5-7B-Instruct")
    assert list(models.iterdir()) == []
    monkeypatch.setattr(huggingface_hub, "snapshot_download", FakeHub(["config.json", "model.safetensors"]))
    download.download_once("Qwen/Qwen2.5-7B-Instruct", models / "Qwen" / "Qwen2.5-7B-Instruct")
    assert [p.name for p in (models / "Qwen").iterdir()] == ["Qwen2.5-7B-Instruct"]


def test_the_download_lock_is_exclusive_while_held_and_its_file_goes_on_release(tmp_path: Path) -> None:
    """The holder removes the lock file; a process waiting on the removed file takes the new one (one holder)."""
    import subprocess
    import sys

    lock = tmp_path / "Org" / ".m.lock"
    waiter = ("import sys,time; from pathlib import Path; from ftagent.models.download import _unlinked_lock\n"
              "with _unlinked_lock(Path(sys.argv[1])): print('got', flush=True)\n")
    with download._unlinked_lock(lock):
        proc = subprocess.Popen([sys.executable, "-c", waiter, str(lock)], stdout=subprocess.PIPE, text=True)
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=2)  # blocked while this process holds it
        assert lock.is_file()
    assert proc.communicate(timeout=60)[0] == "got\n"
    assert not (tmp_path / "Org").exists()
