"""A model folder in the Hugging Face cache layout works inside bubblewrap and Docker (issue 30, 11b).

``snapshots/<rev>/config.json`` is a relative symlink into ``../../blobs/``; binding only the
snapshot folder left every link dangling.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ftagent.runners import sandbox
from ftagent.runners.base import Mount
from ftagent.runners.docker import DockerRunner
from ftagent.runners.mounts import hf_blobs_dir, with_hf_blobs

BWRAP_OK, BWRAP_WHY = sandbox.probe_bwrap()


def _hub_repo(root: Path) -> tuple[Path, Path]:
    """A Hub-cache repo with one snapshot whose files are relative links to blobs, as huggingface_hub
    writes them; returns (snapshot, blobs)."""
    repo = root / "hub" / "models--org--tiny"
    blobs, snap = repo / "blobs", repo / "snapshots" / "0123abcd"
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    (blobs / "e3b0c442").write_text('{"model_type": "qwen2"}\n')
    (snap / "config.json").symlink_to(Path("..") / ".." / "blobs" / "e3b0c442")
    return snap, blobs


def test_hf_blobs_dir_finds_the_repo_blobs_only_in_the_cache_layout(tmp_path: Path) -> None:
    snap, blobs = _hub_repo(tmp_path)
    assert hf_blobs_dir(snap) == blobs.resolve()
    assert hf_blobs_dir(snap.parent) == blobs.resolve()
    plain = tmp_path / "models" / "tiny"
    plain.mkdir(parents=True)
    assert hf_blobs_dir(plain) is None
    # a look-alike whose blobs is a link (code in a writable workspace could plant one) adds nothing
    fake = tmp_path / "ws" / "x"
    (fake / "snapshots" / "r").mkdir(parents=True)
    (fake / "blobs").symlink_to(tmp_path / "models")
    assert hf_blobs_dir(fake / "snapshots" / "r") is None


def test_with_hf_blobs_adds_one_read_only_mount_where_the_links_lead(tmp_path: Path) -> None:
    snap, blobs = _hub_repo(tmp_path)
    out = with_hf_blobs([Mount(source=snap), Mount(source=snap, read_only=True)], resolve_sources=True)
    extra = [m for m in out if m.source == blobs.resolve()]
    assert len(extra) == 1 and extra[0].read_only and extra[0].target is None
    moved = with_hf_blobs([Mount(source=snap, target=Path("/models/tiny"))], resolve_sources=True)
    assert moved[-1].target == Path("/blobs")  # /models/tiny/../../blobs
    assert with_hf_blobs([Mount(source=tmp_path)], resolve_sources=True) == [Mount(source=tmp_path)]


def test_bwrap_argv_binds_the_blobs(tmp_path: Path) -> None:
    snap, blobs = _hub_repo(tmp_path)
    argv = sandbox.bwrap_argv(["true"], workdir=tmp_path / "wd", tools_env=None, mounts=[Mount(source=snap)])
    b = str(blobs.resolve())
    assert any(argv[i:i + 3] == ["--ro-bind", b, b] for i in range(len(argv)))


@pytest.mark.skipif(not BWRAP_OK, reason=f"bubblewrap unusable here: {BWRAP_WHY}")
def test_real_bwrap_reads_a_model_file_through_the_snapshot_link(tmp_path: Path) -> None:
    snap, _ = _hub_repo(tmp_path)
    (tmp_path / "wd").mkdir()
    argv = sandbox.bwrap_argv(["cat", str(snap / "config.json")], workdir=tmp_path / "wd", tools_env=None,
                              mounts=[Mount(source=snap)], executable="bwrap")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == '{"model_type": "qwen2"}\n'


@pytest.mark.skipif(not BWRAP_OK, reason=f"bubblewrap unusable here: {BWRAP_WHY}")
def test_real_bwrap_reads_a_model_given_through_a_symlinked_folder(tmp_path: Path) -> None:
    """``FT_FILE_PATH/models/org/tiny`` linking into the Hub cache: the command is given the link's path."""
    snap, _ = _hub_repo(tmp_path)
    link = tmp_path / "ff" / "models" / "org" / "tiny"
    link.parent.mkdir(parents=True)
    link.symlink_to(snap)
    (tmp_path / "wd").mkdir()
    wd_link = tmp_path / "ws_link"
    wd_link.symlink_to(tmp_path / "wd")
    argv = sandbox.bwrap_argv(["sh", "-c", f"cat {link}/config.json && ls {wd_link}"], workdir=wd_link,
                              tools_env=None, mounts=[Mount(source=link)], executable="bwrap")
    assert ["--symlink", str(snap.resolve()), str(link)] == argv[argv.index(str(link)) - 2:argv.index(str(link)) + 1]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith('{"model_type": "qwen2"}\n')


def test_docker_volumes_carry_the_blobs(tmp_path: Path) -> None:
    snap, blobs = _hub_repo(tmp_path)
    runner = DockerRunner(client=object())
    vols = runner.volumes("train", tmp_path / "wd", [Mount(source=snap)])
    assert vols[str(blobs.resolve())] == {"bind": str(blobs.resolve()), "mode": "ro"}
    # a model folder given through a symlink: Docker shows it at the link's path, so the relative
    # links lead next to that path
    link = tmp_path / "models" / "org" / "tiny"
    link.parent.mkdir(parents=True)
    link.symlink_to(snap)
    vols = runner.volumes("eval", tmp_path / "wd", [Mount(source=link)])
    assert vols[str(blobs.resolve())] == {"bind": str(tmp_path / "models" / "blobs"), "mode": "ro"}
