"""File access in a tree that confined code can write (issue 39 item 1): no link followed, no special file opened.

A loop workspace (``WORKSPACE_PATH/<session>/loop_<n>``), the full data run's folder and an evaluation's work
folder are bound read-write into the sandbox of the commands that run there (the planner's data script, the
trainer, OpenCompass). Whatever those commands leave there is untrusted input to ftagent's own, unconfined
process: a symlink ``logs/train.log -> ~/.bashrc`` would make ftagent append to ``~/.bashrc``, a FIFO would
hang the reader that opens it, a link to ``~/.ssh`` would be read as if it were a model file.

Two mechanisms keep the unconfined side from following them:

* :func:`scrub` -- when a confined command has ended (every process of its sandbox is dead), every entry of its
  writable tree that is neither a regular file nor a folder (symlinks, FIFOs, sockets, device nodes) is
  removed, walking with directory descriptors and ``O_NOFOLLOW``. From then until the next confined command
  starts, the tree holds only regular files and folders, so ftagent's sequential reads and writes there
  cannot follow a link whatever function does them.
* :func:`open_beneath` (and :func:`read_bytes`, :func:`open_append`) -- for what ftagent opens *while* a
  confined command runs (its log, ``trainer_log.jsonl``, OpenCompass's log) and for the files that decide
  something (``data.json``, the frozen copies): each path component below the tree's root is opened relative
  to its parent's descriptor with ``O_NOFOLLOW``, the file itself with ``O_NONBLOCK`` (a FIFO cannot block the
  open) and refused unless ``fstat`` says it is a regular file; reads are bounded.

The root itself is trusted: it is a folder ftagent created and confined code cannot replace (inside the
sandbox it is the bind's mount point, and its parent is never bound).
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
from pathlib import Path
from typing import IO

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: deeper than this, :func:`scrub` removes the folder whole (a tree 10,000 folders deep would exhaust descriptors)
MAX_DEPTH = 64


class UnsafeEntry(OSError):
    """A link, a special file, a path outside the tree, or a file over its size bound where ftagent expected a
    regular file or folder in an untrusted tree."""


def _relative(root: Path, path: Path | str) -> list[str]:
    """The components of ``path`` below ``root`` (``path`` absolute under ``root``, or relative to it)."""
    p = Path(path)
    if p.is_absolute():
        try:
            p = p.relative_to(Path(root))
        except ValueError:
            raise UnsafeEntry(errno.EXDEV, f"{path} is not inside {root}") from None
    parts = [part for part in p.parts if part not in ("", ".")]
    if not parts or ".." in parts:
        raise UnsafeEntry(errno.EINVAL, f"{path}: not a file path inside {root}")
    return parts


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device node"
    return "folder" if stat.S_ISDIR(mode) else "regular file" if stat.S_ISREG(mode) else "special file"


def _open_dir(name: str, dir_fd: int, shown: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
            raise UnsafeEntry(errno.ELOOP, f"{shown} is a {_kind(mode)}, not a folder: refused") from None
        raise


def _parent_fd(root: Path, parts: list[str], *, create: bool) -> int:
    """A descriptor of the folder holding ``parts[-1]``, every folder below ``root`` opened without following
    links (``create``: missing folders are made)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, name in enumerate(parts[:-1]):
            shown = "/".join(parts[: i + 1])
            try:
                nfd = _open_dir(name, fd, shown)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(name, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
                nfd = _open_dir(name, fd, shown)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_beneath(root: Path | str, path: Path | str, flags: int = os.O_RDONLY, mode: int = 0o644, *,
                 create_dirs: bool = False) -> int:
    """A descriptor of the regular file ``path`` inside ``root``, reached without following any link below
    ``root``; the caller closes it.

    Raises:
        UnsafeEntry: a component is a link or not a folder, or the file is not a regular file.
        OSError: as ``os.open`` (e.g. FileNotFoundError without ``os.O_CREAT``).
    """
    parts = _relative(Path(root), path)
    parent = _parent_fd(Path(root), parts, create=create_dirs)
    shown = "/".join(parts)
    try:
        try:
            fd = os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode, dir_fd=parent)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
                kind = _kind(os.stat(parts[-1], dir_fd=parent, follow_symlinks=False).st_mode)
                raise UnsafeEntry(exc.errno, f"{shown} is a {kind}: refused") from None
            raise
    finally:
        os.close(parent)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UnsafeEntry(errno.EINVAL, f"{shown} is a {_kind(st.st_mode)}: refused")
    os.set_blocking(fd, True)
    return fd


def read_bytes(root: Path | str, path: Path | str, *, limit: int) -> bytes:
    """The bytes of a regular file inside ``root`` (see :func:`open_beneath`), at most ``limit`` of them.

    Raises:
        UnsafeEntry: not a regular file reached without links, or larger than ``limit``.
    """
    fd = open_beneath(root, path)
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > limit:
            raise UnsafeEntry(errno.EFBIG, f"{path}: {size:,} bytes, over the {limit:,} this file may hold")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise UnsafeEntry(errno.EFBIG, f"{path}: over the {limit:,} bytes this file may hold")
    return data


def read_tail_from(root: Path | str, path: Path | str, offset: int, *, limit: int = 4 << 20) -> tuple[bytes, int]:
    """``(bytes from offset on, at most limit of them; the file's size)`` of a regular file inside ``root`` that
    another process appends to (a log followed while its command runs); see :func:`open_beneath`."""
    with os.fdopen(open_beneath(root, path), "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        fh.seek(min(offset, size))
        return fh.read(limit), size


def read_last(root: Path | str, path: Path | str, *, limit: int) -> bytes:
    """The last ``limit`` bytes of a regular file inside ``root`` (a log's tail); see :func:`open_beneath`."""
    with os.fdopen(open_beneath(root, path), "rb") as fh:
        fh.seek(max(0, os.fstat(fh.fileno()).st_size - limit))
        return fh.read(limit)


def read_text(root: Path | str, path: Path | str, *, limit: int) -> str:
    """:func:`read_bytes` decoded as UTF-8 (invalid bytes replaced)."""
    return read_bytes(root, path, limit=limit).decode("utf-8", errors="replace")


def open_append(root: Path | str, path: Path | str) -> IO[str]:
    """A text file opened for appending (created with its folders when missing), without following links."""
    fd = open_beneath(root, path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, create_dirs=True)
    return os.fdopen(fd, "a", encoding="utf-8", errors="replace")


def write_bytes(root: Path | str, path: Path | str, data: bytes) -> None:
    """Write a file inside ``root`` atomically (a new file, then a rename over the old name: a link there is
    replaced, never followed); its folders are made without following links."""
    parts = _relative(Path(root), path)
    parent = _parent_fd(Path(root), parts, create=True)
    tmp = f".{parts[-1]}.ftagent-tmp"
    try:
        try:
            os.unlink(tmp, dir_fd=parent)
        except FileNotFoundError:
            pass
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=parent)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.rename(tmp, parts[-1], src_dir_fd=parent, dst_dir_fd=parent)
    finally:
        os.close(parent)


def sha256_beneath(root: Path | str, path: Path | str, chunk: int = 1 << 20) -> str:
    """The SHA-256 of a regular file inside ``root`` reached without links (any size)."""
    h = hashlib.sha256()
    with os.fdopen(open_beneath(root, path), "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def copy_beneath(root: Path | str, path: Path | str, dest: Path, chunk: int = 1 << 20) -> str:
    """Copy a regular file inside ``root`` (reached without links, any size) to the new file ``dest``; return the
    SHA-256 of what was copied."""
    h = hashlib.sha256()
    with os.fdopen(open_beneath(root, path), "rb") as src, open(dest, "xb") as out:
        while block := src.read(chunk):
            h.update(block)
            out.write(block)
    return h.hexdigest()


def regular_files(root: Path | str, path: Path | str = ".") -> list[str]:
    """Every regular file under ``root/path`` (relative to ``root``, sorted); links and special files are
    skipped, never followed."""
    out: list[str] = []
    start = Path(root) if str(path) in (".", "") else Path(root) / "/".join(_relative(Path(root), path))
    fd = os.open(start, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    prefix = "" if str(path) in (".", "") else "/".join(_relative(Path(root), path)) + "/"
    _collect(fd, prefix, out, 0)
    return sorted(out)


def _collect(fd: int, prefix: str, out: list[str], depth: int) -> None:
    try:
        names = sorted(os.listdir(fd))
        for name in names:
            mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
            if stat.S_ISREG(mode):
                out.append(prefix + name)
            elif stat.S_ISDIR(mode) and depth < MAX_DEPTH:
                _collect(os.open(name, _DIR_FLAGS, dir_fd=fd), f"{prefix}{name}/", out, depth + 1)
    finally:
        os.close(fd)


def scrub(root: Path | str) -> list[str]:
    """Remove every symlink, FIFO, socket and device node under ``root`` (never following a link); return
    what was removed, e.g. ``["logs/train.log (symlink -> /home/u/.bashrc)"]``.

    Call it only when no confined process can write ``root`` any more (its command has ended): then the tree
    holds only regular files and folders until the next confined command starts. Folders confined code made
    unreadable are made readable again (they belong to ftagent's user); folders nested deeper than
    :data:`MAX_DEPTH` are removed whole. A missing ``root`` is nothing to scrub.
    """
    try:
        fd = os.open(Path(root), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return []
    removed: list[str] = []
    _scrub_dir(fd, "", removed, 0)
    return removed


def _scrub_dir(fd: int, prefix: str, removed: list[str], depth: int) -> None:
    try:
        for name in sorted(os.listdir(fd)):
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISREG(st.st_mode):
                continue
            if stat.S_ISDIR(st.st_mode):
                _scrub_subdir(fd, name, prefix, removed, depth)
                continue
            kind = _kind(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                kind += f" -> {os.readlink(name, dir_fd=fd)}"
            try:
                os.unlink(name, dir_fd=fd)
            except PermissionError:  # a folder confined code made read-only: it belongs to ftagent's user
                os.fchmod(fd, 0o755)
                os.unlink(name, dir_fd=fd)
            removed.append(f"{prefix}{name} ({kind})")
    finally:
        os.close(fd)


def _scrub_subdir(fd: int, name: str, prefix: str, removed: list[str], depth: int) -> None:
    if depth >= MAX_DEPTH:
        shutil.rmtree(name, dir_fd=fd)  # fd-based and link-safe on Linux (shutil.rmtree.avoids_symlink_attacks)
        removed.append(f"{prefix}{name}/ (folders nested over {MAX_DEPTH} deep)")
        return
    try:
        sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
    except PermissionError:  # made unreadable by confined code; it is a folder of ftagent's user (lstat above)
        os.chmod(name, 0o755, dir_fd=fd)
        sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
    _scrub_dir(sub, f"{prefix}{name}/", removed, depth + 1)
