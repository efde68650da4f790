"""ftagent.core.untrusted and ftagent.core.approved on real files: links and FIFOs planted the way a sandboxed
command would leave them are never followed or opened; frozen copies report what changed (issue 39 items 1, 2)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from ftagent.core.approved import Approved, Fingerprint
from ftagent.core.untrusted import (
    UnsafeEntry,
    open_append,
    read_bytes,
    read_tail_from,
    regular_files,
    scrub,
    sha256_beneath,
    write_bytes,
)


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    """(an untrusted tree holding links and a FIFO, an outside folder with a secret file)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("SECRET\n")
    ws = tmp_path / "ws"
    (ws / "logs").mkdir(parents=True)
    (ws / "data.json").write_text("[]")
    (ws / "logs" / "train.log").symlink_to(outside / "secret.txt")
    (ws / "output").symlink_to(outside)
    os.mkfifo(ws / "fifo")
    return ws, outside


def _no_hang(fn, *args, **kw):
    """Run ``fn`` in a thread; fail (not hang) when it blocks, as an open of a FIFO would."""
    out: dict[str, object] = {}

    def target() -> None:
        try:
            out["value"] = fn(*args, **kw)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            out["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), f"{fn.__name__} blocked"
    if "error" in out:
        raise out["error"]  # type: ignore[misc]
    return out.get("value")


def test_links_and_fifos_are_refused_never_followed(tree: tuple[Path, Path]) -> None:
    ws, outside = tree
    assert read_bytes(ws, "data.json", limit=10) == b"[]"
    with pytest.raises(UnsafeEntry, match="logs/train.log is a symlink"):
        read_bytes(ws, ws / "logs" / "train.log", limit=100)
    with pytest.raises(UnsafeEntry, match="output is a symlink"):
        read_bytes(ws, "output/secret.txt", limit=100)
    with pytest.raises(UnsafeEntry, match="fifo is a FIFO"):
        _no_hang(read_bytes, ws, "fifo", limit=100)
    with pytest.raises(UnsafeEntry, match="fifo is a FIFO"):  # a writer's open of a FIFO without a reader
        _no_hang(open_append, ws, "fifo")
    with pytest.raises(UnsafeEntry, match="logs/train.log is a symlink"):
        open_append(ws, "logs/train.log")
    with pytest.raises(UnsafeEntry, match="output is a symlink"):
        open_append(ws, "output/new.log")
    with pytest.raises(UnsafeEntry, match="not inside"):
        read_bytes(ws, outside / "secret.txt", limit=100)
    with pytest.raises(UnsafeEntry, match="2 bytes, over the 1 this file may hold"):
        read_bytes(ws, "data.json", limit=1)
    with pytest.raises(UnsafeEntry):
        read_tail_from(ws, "logs/train.log", 0)
    assert (outside / "secret.txt").read_text() == "SECRET\n" and sorted(os.listdir(outside)) == ["secret.txt"]


def test_write_replaces_a_link_instead_of_writing_through_it(tree: tuple[Path, Path]) -> None:
    ws, outside = tree
    write_bytes(ws, "logs/train.log", b"mine")
    assert (ws / "logs" / "train.log").read_bytes() == b"mine" and not (ws / "logs" / "train.log").is_symlink()
    with pytest.raises(UnsafeEntry):  # a linked folder is not walked into
        write_bytes(ws, "output/model.safetensors", b"x")
    assert (outside / "secret.txt").read_text() == "SECRET\n" and sorted(os.listdir(outside)) == ["secret.txt"]


def test_scrub_removes_links_fifos_and_keeps_files(tree: tuple[Path, Path]) -> None:
    ws, outside = tree
    deep = ws / "a" / "b"
    deep.mkdir(parents=True)
    (deep / "keep.txt").write_text("k")
    (deep / "up").symlink_to("../../..")
    locked = ws / "locked"
    locked.mkdir()
    (locked / "link").symlink_to(outside)
    locked.chmod(0o000)
    removed = scrub(ws)
    assert sorted(r.split(" ")[0] for r in removed) == ["a/b/up", "fifo", "locked/link", "logs/train.log", "output"]
    assert any("-> " + str(outside / "secret.txt") in r for r in removed)
    assert regular_files(ws) == ["a/b/keep.txt", "data.json"]
    assert (outside / "secret.txt").read_text() == "SECRET\n"
    assert scrub(ws) == [] and scrub(ws / "missing") == []


def test_fingerprint_names_what_changed(tmp_path: Path) -> None:
    frozen = tmp_path / "frozen"
    (frozen / "code").mkdir(parents=True)
    (frozen / "code" / "process_data.py").write_text("print(1)")
    (frozen / "train.yaml").write_text("template: qwen\n")
    (frozen / "validated_run").mkdir()
    (frozen / "validated_run" / "tokenizer_config.json").write_text("{}")
    approved = Approved(frozen=Fingerprint.take(frozen, regular_files(frozen)), data_dir=str(tmp_path / "data"))
    assert approved.changes() == []
    assert approved.config_path == frozen / "train.yaml" and approved.validated_run == frozen / "validated_run"
    assert approved.artefacts()["process_data.py"] == str(frozen / "code" / "process_data.py")
    assert Approved.model_validate_json(approved.model_dump_json()) == approved  # lives in the snapshot
    (frozen / "train.yaml").write_text("template: llama3\n")
    (frozen / "validated_run" / "tokenizer_config.json").unlink()
    (frozen / "validated_run" / "tokenizer_config.json").symlink_to(tmp_path)
    (frozen / "code" / "process_data.py").unlink()
    changes = approved.changes()
    assert any(c.startswith("frozen/train.yaml (changed: sha256") for c in changes)
    assert "frozen/code/process_data.py (missing)" in changes
    assert any(c.startswith("frozen/validated_run/tokenizer_config.json (") and "symlink" in c for c in changes)
    whole = Fingerprint.take(frozen / "validated_run")
    (frozen / "validated_run" / "model_zz.safetensors").write_bytes(b"w")
    assert "model_zz.safetensors (added)" in whole.changes()
    assert sha256_beneath(frozen, "train.yaml") != approved.frozen.files["train.yaml"]
