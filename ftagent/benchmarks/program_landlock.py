"""A scored program's confinement where bubblewrap cannot make namespaces: Landlock and a seccomp filter.

Inside a Docker container under the engine's default seccomp profile (the docker runner), ``unshare`` of a user
namespace is refused, so :mod:`ftagent.benchmarks.program_sandbox` cannot start bubblewrap. The kernel's Landlock
LSM needs no namespace and no privilege (``landlock_create_ruleset``, ``landlock_add_rule``,
``landlock_restrict_self``; Linux 5.13+, allowed by Docker's default profile), so each program, between ``fork`` and
``exec``, restricts itself:

* **files** (every access right of the running kernel's ABI is handled): read and execute only the system folders
  and the interpreter's prefixes; read and write only its own fresh folder; ``/dev/null`` read-write and
  ``/dev/urandom`` read. Nothing else is reachable by path: not the evaluation's work folder, not the items, not
  ``/etc`` or the home folder, not ``/proc`` (so no ``/proc/<parent>/environ``, ``cwd`` or ``root``);
* **processes**: a Landlock domain cannot ``ptrace`` a process outside it (every ABI), and from ABI 6 it sends no
  signal to one and reaches no abstract UNIX socket outside it (``scoped``);
* **network**: from ABI 4, no TCP ``bind`` or ``connect``; and a seccomp filter refuses ``socket()`` of every
  family but ``AF_UNIX`` (UDP, raw, netlink, vsock ...) and ``io_uring_setup`` (its socket operations bypass
  seccomp), ``EACCES``. With ``no_new_privs`` set (required by both), nothing the program execs gains privilege.
  Not covered: ``connect`` to a pathname ``AF_UNIX`` socket (Landlock up to ABI 7 does not check it; the docker
  runner mounts none of the host's), System V IPC of the same user, the PID namespace (unlisted without ``/proc``).

Cost (this 2-core host, 20 trivial programs through ``code_tests.run_tests``): a median of 64 ms under Landlock,
61 ms unconfined, 95 ms in bubblewrap; ``preexec_fn`` makes ``subprocess`` fork instead of vfork, which costs more
in a scorer process as large as OpenCompass's eval task (the docstring of ``program_sandbox.limits_source``).

Programs keep the caller's environment (a few fixed variables) and the resource limits their harness sets. A
kernel whose Landlock ABI is below :data:`MIN_ABI` (no network rules) is not used: the program runs unconfined
and the evaluation's log says so. Standard library only (imported inside the tool env).
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct

MIN_ABI = 4  # TCP bind/connect rules
_SYS_CREATE, _SYS_ADD_RULE, _SYS_RESTRICT = 444, 445, 446  # the same number on every architecture
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_FS_BITS_BY_ABI = {1: 13, 2: 14, 3: 15, 4: 15, 5: 16}  # how many LANDLOCK_ACCESS_FS_* bits each ABI knows
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1, 2, 4, 8
_TRUNCATE = 1 << 14
_FILE_ONLY = _EXECUTE | _WRITE_FILE | _READ_FILE | _TRUNCATE | (1 << 15)  # the rights a rule on a file may hold
_NET_BIND_TCP, _NET_CONNECT_TCP = 1, 2
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1, 2
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2
#: (AUDIT_ARCH, socket, io_uring_setup) of the architectures the seccomp filter knows
_ARCHES = {"x86_64": (0xC000003E, 41, 425), "aarch64": (0xC00000B7, 198, 425)}
_AF_UNIX, _EACCES = 1, 13

_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.syscall.restype = ctypes.c_long


def abi() -> int:
    """The running kernel's Landlock ABI version (0: none, or refused here)."""
    version = _LIBC.syscall(ctypes.c_long(_SYS_CREATE), None, ctypes.c_size_t(0),
                            ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(0, int(version))


def _fs_all(version: int) -> int:
    return (1 << _FS_BITS_BY_ABI.get(version, 16)) - 1


def _add_path(ruleset: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # a folder this system lacks (/lib32 ...)
    try:
        if not os.path.isdir(path):
            access &= _FILE_ONLY
        rule = struct.pack("=Qi", access, fd)  # struct landlock_path_beneath_attr (packed)
        if _LIBC.syscall(ctypes.c_long(_SYS_ADD_RULE), ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                         ctypes.c_char_p(rule), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
    finally:
        os.close(fd)


def ruleset(folder: str, readable: list[str]) -> int:
    """A Landlock ruleset (its descriptor): ``readable`` read and execute, ``folder`` read and write, nothing else
    (module docstring). Built in the scorer, before ``fork``; :func:`restrict` applies it in the child."""
    version = abi()
    if version < MIN_ABI:
        raise OSError(f"Landlock ABI {version} < {MIN_ABI}")
    everything = _fs_all(version)
    scoped = (_SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL) if version >= 6 else 0
    attr = struct.pack("=QQQ", everything, _NET_BIND_TCP | _NET_CONNECT_TCP, scoped)
    size = 24 if version >= 6 else 16
    fd = _LIBC.syscall(ctypes.c_long(_SYS_CREATE), ctypes.c_char_p(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if fd < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    try:
        for path in readable:
            _add_path(fd, path, _READ_FILE | _READ_DIR | _EXECUTE)
        _add_path(fd, folder, everything)
        _add_path(fd, "/dev/null", _READ_FILE | _WRITE_FILE | _TRUNCATE)
        _add_path(fd, "/dev/urandom", _READ_FILE)
    except BaseException:
        os.close(fd)
        raise
    return int(fd)


def _seccomp_filter() -> bytes | None:
    """The BPF program of the module docstring for this architecture (None: an architecture it does not know)."""
    arch = _ARCHES.get(platform.machine())
    if arch is None:
        return None
    audit, sys_socket, sys_uring = arch
    allow, deny = 0x7FFF0000, 0x00050000 | _EACCES  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EACCES
    kill = 0x80000000  # SECCOMP_RET_KILL_PROCESS: another architecture's calls
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JGE|K, BPF_RET|K
    prog = [  # (code, jump if true, jump if false, k); a jump skips that many instructions
        (ld, 0, 0, 4), (jeq, 1, 0, audit), (ret, 0, 0, kill),        # 0-2 seccomp_data.arch: this one only
        (ld, 0, 0, 0), (jge, 4, 0, 0x40000000),                       # 3-4 seccomp_data.nr; x32 calls: deny
        (jeq, 3, 0, sys_uring), (jeq, 0, 3, sys_socket),              # 5-6 io_uring_setup: deny; socket: 7
        (ld, 0, 0, 16), (jeq, 1, 0, _AF_UNIX),                        # 7-8 args[0] (low word): the family
        (ret, 0, 0, deny), (ret, 0, 0, allow),                        # 9-10
    ]
    return b"".join(struct.pack("=HBBI", *ins) for ins in prog)


_FILTER = _seccomp_filter()
_FILTER_BUF = ctypes.create_string_buffer(_FILTER or b"")
_FPROG = struct.pack("@HP", len(_FILTER or b"") // 8, ctypes.addressof(_FILTER_BUF))  # sock_fprog


def restrict(fd: int) -> None:
    """In the child before ``exec`` (no allocation beyond ctypes' own): ``no_new_privs``, the seccomp filter, the
    Landlock ruleset ``fd``. A failure ends the child (``os._exit(126)``): never an unconfined program."""
    ok = _LIBC.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
    if ok and _FILTER:
        ok = _LIBC.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.c_char_p(_FPROG), 0, 0) == 0
    ok = ok and _LIBC.syscall(ctypes.c_long(_SYS_RESTRICT), ctypes.c_int(fd), ctypes.c_uint32(0)) == 0
    os.close(fd)
    if not ok:
        os._exit(126)
