"""A small supervisor between ftagent and one tool process, so the tool's whole process tree dies with ftagent.

Run as a *script* (``python supervise.py <owner pid> -- <argv...>``, see :func:`supervised_argv`), never
imported by the child side: it must start fast and needs only the standard library (psutil when present).

Why not ``PR_SET_PDEATHSIG`` alone: it reaches only the direct child, fires when the *thread* that forked
exits (not the process), and is cleared on exec of a set-uid binary. The tool's own children (OpenCompass
workers, torch data loaders) would outlive ftagent. The supervisor instead

* is the leader of a new session/process group (the caller starts it with ``start_new_session=True``); the
  tool and everything it spawns stay in that group unless they leave it on purpose;
* polls its parent pid; once ftagent is gone (``getppid()`` changed: SIGKILL, OOM killer, crash) it kills
  every descendant (psutil walk, for those that left the group) and then its whole group, itself last;
* outlives SIGTERM/SIGINT/SIGHUP sent to the group (the tool gets them directly and decides), and exits
  with the tool's status (re-raising a fatal signal on itself, so the caller sees ``-N`` as before).
  Callers signal the group (``os.killpg``), never the supervisor's pid alone.

With ``--docker-owner LABEL`` it supervises no command: it waits for ftagent to die, then force-removes
every container labelled ``org.ftagent.owner=LABEL`` (the Docker runner starts one such watcher).
"""

from __future__ import annotations

import os
import sys

# Run as a script, Python puts this folder first on sys.path, where docker.py (the runner) would shadow
# the docker SDK the watcher imports.
if __name__ == "__main__" and sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]

import signal  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

POLL_S = 0.2
OWNER_LABEL = "org.ftagent.owner"


def supervised_argv(argv: list[str], owner_pid: int | None = None) -> list[str]:
    """``argv`` wrapped in the supervisor, run with this interpreter (the ftagent env's python)."""
    owner = os.getpid() if owner_pid is None else owner_pid
    return [sys.executable, "-u", os.path.abspath(__file__), str(owner), "--", *argv]


def watcher_argv(owner_label: str, owner_pid: int | None = None) -> list[str]:
    """The command line of a Docker watcher for the containers labelled ``owner_label``."""
    owner = os.getpid() if owner_pid is None else owner_pid
    return [sys.executable, "-u", os.path.abspath(__file__), str(owner), "--docker-owner", owner_label]


def _owner_gone(owner: int) -> bool:
    return os.getppid() != owner


def _kill_everything() -> None:
    """SIGKILL every descendant, then the whole process group (this process included, so last)."""
    try:
        import psutil

        for proc in psutil.Process().children(recursive=True):
            try:
                proc.kill()
            except psutil.Error:
                pass
    except ImportError:  # the group kill below still reaches everything that stayed in the group
        pass
    os.killpg(os.getpgrp(), signal.SIGKILL)


def _swallow(_signum, _frame) -> None:
    return None


def _supervise(owner: int, argv: list[str]) -> int:
    if _owner_gone(owner):  # ftagent died between fork and now
        _kill_everything()
    try:
        child = subprocess.Popen(argv)  # same process group; stdio inherited (the caller's log pipe)
    except OSError as exc:
        print(f"[ftagent] cannot start {argv[0]}: {exc}", flush=True)
        return 127

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        # ftagent signals the whole group, so the tool already has it: swallowing it here (rather than
        # forwarding) keeps the tool from seeing it twice; the tool's exit then ends this process
        signal.signal(sig, _swallow)
    while True:
        try:
            rc = child.wait(timeout=POLL_S)
            break
        except subprocess.TimeoutExpired:
            if _owner_gone(owner):
                _kill_everything()
    if rc < 0:  # killed by a signal: die the same way so the caller's returncode stays -N
        if -rc not in (signal.SIGKILL, signal.SIGSTOP):  # those two cannot be caught, nor reset
            signal.signal(-rc, signal.SIG_DFL)
        os.kill(os.getpid(), -rc)
        return 128 - rc
    return rc


def remove_owned_containers(owner_label: str) -> list[str]:
    """Force-remove the containers labelled ``org.ftagent.owner=<owner_label>``; returns their ids."""
    import docker

    client = docker.from_env()
    removed = []
    label = {"label": f"{OWNER_LABEL}={owner_label}"}
    for container in client.containers.list(all=True, sparse=True, filters=label):  # sparse: no inspect race
        try:
            client.api.remove_container(container.id, force=True)
            removed.append(container.id)
        except docker.errors.APIError:
            pass
    return removed


def _watch_docker(owner: int, owner_label: str) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is ftagent's to handle; this outlives it
    while not _owner_gone(owner):
        time.sleep(POLL_S)
    try:
        remove_owned_containers(owner_label)
    except Exception as exc:  # noqa: BLE001 - no engine: nothing this watcher can do; the reaper retries
        print(f"[ftagent] container watcher: {exc}", file=sys.stderr)
        return 1
    return 0


def main(args: list[str]) -> int:
    """``<owner pid> -- argv...`` or ``<owner pid> --docker-owner LABEL``."""
    if len(args) >= 3 and args[1] == "--docker-owner":
        return _watch_docker(int(args[0]), args[2])
    if len(args) < 3 or args[1] != "--":
        print("usage: supervise.py OWNER_PID -- ARGV... | OWNER_PID --docker-owner LABEL", file=sys.stderr)
        return 2
    return _supervise(int(args[0]), args[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
