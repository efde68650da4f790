"""LocalRunner and the process helper: streaming, timeouts, environment hygiene, sandbox."""

from __future__ import annotations

import functools
import json
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from ftagent.core.errors import EnvironmentFailure
from ftagent.runners import sandbox
from ftagent.runners.base import Mount
from ftagent.runners.local import LocalRunner
from ftagent.runners.process import is_secret_name, passthrough_env

BWRAP_OK, BWRAP_WHY = sandbox.probe_bwrap()


@pytest.fixture(scope="module")
def fake_tools_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real (pip-less) venv standing in for the tool env; it has a fake `llamafactory-cli`."""
    env = tmp_path_factory.mktemp("toolenv") / "tools"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    cli = env / "bin" / "llamafactory-cli"
    cli.write_text("#!/bin/sh\necho fake-lf \"$@\"\n")
    cli.chmod(0o755)
    return env


def _runner(env: Path, sandbox_mode: str = "none") -> LocalRunner:
    return LocalRunner(env, sandbox=sandbox_mode, gpu=False)


def test_exit_code_tail_and_tool_resolution(fake_tools_env: Path, tmp_path: Path) -> None:
    runner = _runner(fake_tools_env)
    log = tmp_path / "logs" / "a.log"
    res = runner.run(["python", "-c", "import sys\nfor i in range(80): print(i)\nsys.exit(3)"],
                     tool="data", workdir=tmp_path / "wd", log_file=log, timeout=60)
    assert res.exit_code == 3 and not res.ok and not res.timed_out
    assert res.log_tail.splitlines() == [str(i) for i in range(30, 80)]
    assert log.read_text().splitlines() == [str(i) for i in range(80)]
    assert res.log_file == str(log)
    res = runner.run(["llamafactory-cli", "train", "x.yaml"], tool="train", workdir=tmp_path / "wd")
    assert res.ok and res.log_tail == "fake-lf train x.yaml"
    assert runner.resolve_cmd(["python", "-V"])[0] == str(fake_tools_env.absolute() / "bin" / "python")


def test_timeout_kills_the_whole_tree(fake_tools_env: Path, tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    script = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen(['sleep', '300'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "print('spawned', flush=True)\n"
        "time.sleep(300)\n"
    )
    start = time.monotonic()
    res = _runner(fake_tools_env).run(["python", "-c", script], tool="data", workdir=tmp_path, timeout=3)
    assert res.timed_out and res.exit_code is None and not res.ok
    assert time.monotonic() - start < 30
    assert "spawned" in res.log_tail and "timed out" in res.log_tail
    grandchild = int(pidfile.read_text())
    time.sleep(0.2)
    alive = psutil.pid_exists(grandchild) and psutil.Process(grandchild).status() != psutil.STATUS_ZOMBIE
    assert not alive


def test_log_is_streamed_while_running(fake_tools_env: Path, tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    script = "import time\nprint('first', flush=True)\ntime.sleep(4)\nprint('second')\n"
    box: dict = {}
    thread = threading.Thread(target=lambda: box.setdefault("res", _runner(fake_tools_env).run(
        ["python", "-c", script], tool="data", workdir=tmp_path, log_file=log, timeout=60)))
    thread.start()
    seen_first_while_running = False
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and thread.is_alive():
        if log.exists() and "first" in log.read_text():
            seen_first_while_running = "second" not in log.read_text()
            break
        time.sleep(0.05)
    thread.join(60)
    assert seen_first_while_running
    assert box["res"].ok and log.read_text().split() == ["first", "second"]


def test_secrets_are_not_inherited(fake_tools_env: Path, tmp_path: Path, monkeypatch) -> None:
    for name in ("OPENAI_API_KEY", "HF_TOKEN", "DB_PASSWORD", "MY_SECRET", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "leak")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("RANDOM_PROJECT_VAR", "x")
    res = _runner(fake_tools_env).run(
        ["python", "-c", "import os, json; print(json.dumps(dict(os.environ)))"], tool="data",
        workdir=tmp_path, env={"JUDGE_API_KEY": "explicit"}, timeout=60)
    child = json.loads(res.log_tail.splitlines()[-1])
    assert "leak" not in child.values()
    assert child["JUDGE_API_KEY"] == "explicit"
    assert child["HF_HUB_OFFLINE"] == "1" and "RANDOM_PROJECT_VAR" not in child
    assert child["PATH"].split(":")[0] == str(fake_tools_env.absolute() / "bin")
    assert child["OMP_NUM_THREADS"] == "1"
    assert is_secret_name("openai_api_key") and not is_secret_name("HF_HOME")
    assert "HF_TOKEN" not in passthrough_env({"HF_TOKEN": "x", "HF_HOME": "/h"})


def test_missing_tool_env_is_an_environment_failure(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentFailure, match="ftagent env setup"):
        _runner(tmp_path / "nope").run(["python", "-V"], tool="train", workdir=tmp_path)


def test_no_bwrap_warns_once_and_strict_mode_fails(monkeypatch, caplog) -> None:
    monkeypatch.setattr(sandbox, "probe_bwrap", lambda executable=None: (False, "bwrap is not installed"))
    monkeypatch.setattr(sandbox, "_warned", False)
    with caplog.at_level(logging.WARNING, logger="ftagent.runners.sandbox"):
        assert sandbox.use_sandbox("auto") is False
        assert sandbox.use_sandbox("auto") is False
    assert [r.getMessage() for r in caplog.records].count(
        f"{sandbox.NO_SANDBOX_WARNING} (bwrap is not installed; {sandbox.INSTALL_HINT} to confine commands)") == 1
    with pytest.raises(EnvironmentFailure, match="FT_SANDBOX=bwrap"):
        sandbox.use_sandbox("bwrap")
    assert sandbox.use_sandbox("none") is False


def test_bwrap_argv_layout(tmp_path: Path) -> None:
    argv = sandbox.bwrap_argv(["python", "x.py"], workdir=tmp_path / "wd", tools_env=None,
                              mounts=[Mount(source=tmp_path / "data"), Mount(source=tmp_path / "out", read_only=False)])
    assert argv[-3:] == ["--", "python", "x.py"]
    joined = " ".join(argv)
    assert f"--ro-bind {tmp_path / 'data'} {tmp_path / 'data'}" in joined
    assert f"--bind {tmp_path / 'out'} {tmp_path / 'out'}" in joined
    assert "--tmpfs /tmp" in joined and "--unshare-pid" in joined
    assert argv.index("--tmpfs") < argv.index(str(tmp_path / "wd"))  # workdir bound over the private /tmp


@pytest.mark.skipif(not BWRAP_OK, reason=f"bubblewrap unusable here: {BWRAP_WHY}")
def test_sandbox_hides_paths_and_honours_mounts(fake_tools_env: Path, tmp_path: Path) -> None:
    hidden = tmp_path / "outside" / "secret.txt"
    hidden.parent.mkdir()
    hidden.write_text("s3cret")
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "data.txt").write_text("visible")
    project = Path(__file__).resolve().parents[2]
    probe = (
        "import json, os, sys\n"
        "def can_write(p):\n"
        "    try:\n        open(p, 'w').write('x'); return True\n    except OSError:\n        return False\n"
        f"print(json.dumps({{'hidden': os.path.exists({str(hidden)!r}),"
        f" 'project': os.path.exists({str(project)!r}),"
        f" 'shared': open({str(shared / 'data.txt')!r}).read(),"
        f" 'shared_writable': can_write({str(shared / 'new.txt')!r}),"
        " 'wd_writable': can_write('out.txt'), 'home': os.environ['HOME']}))\n"
    )
    runner = _runner(fake_tools_env, "bwrap")
    assert runner.sandboxed
    res = runner.run(["python", "-c", probe], tool="data", workdir=tmp_path / "wd",
                     mounts=[Mount(source=shared)], timeout=60)
    assert res.ok, res.log_tail
    seen = json.loads(res.log_tail.splitlines()[-1])
    assert seen == {"hidden": False, "project": False, "shared": "visible", "shared_writable": False,
                    "wd_writable": True, "home": "/tmp"}
    assert (tmp_path / "wd" / "out.txt").read_text() == "x"


def test_nested_binds_parents_first(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    argv = sandbox.bwrap_argv(["true"], workdir=ws / "run", tools_env=None,
                              mounts=[Mount(source=ws), Mount(source=ws / "run" / "model")])
    order = [argv[i + 2] for i, a in enumerate(argv) if a in ("--bind", "--ro-bind") and argv[i + 2].startswith(str(ws))]
    assert order == [str(ws), str(ws / "run"), str(ws / "run" / "model")]
    assert argv[argv.index(str(ws / "run")) - 1] == "--bind"  # the workdir stays writable


# --- the sandbox policy: code written by an LLM never runs unconfined ---------------------------------
def _policy_settings(env_type: str = "local", sandbox_mode: str = "auto", allow: bool = False):
    from types import SimpleNamespace

    return SimpleNamespace(ft=SimpleNamespace(env_type=env_type, sandbox=sandbox_mode, allow_unsandboxed=allow))


def test_llm_planner_without_bwrap_is_refused_with_the_package_name(monkeypatch, caplog) -> None:
    from ftagent.core.errors import UserInputError

    monkeypatch.setattr(sandbox, "probe_bwrap", lambda executable=None: (False, "bwrap is not installed"))
    for env_type in ("local", "conda"):
        with pytest.raises(UserInputError, match=r"apt-get install bubblewrap.*FT_ALLOW_UNSANDBOXED=1"):
            sandbox.require_confinement(_policy_settings(env_type), True)
    with pytest.raises(UserInputError, match="unset FT_SANDBOX=none"):  # bwrap or not, "none" is unconfined
        sandbox.require_confinement(_policy_settings(sandbox_mode="none"), True)
    monkeypatch.setattr(sandbox, "_warned", False)
    with caplog.at_level(logging.WARNING, logger="ftagent.runners.sandbox"):
        allowed = sandbox.require_confinement(_policy_settings(allow=True), True)
        heuristic = sandbox.require_confinement(_policy_settings(), False)
    assert "FT_ALLOW_UNSANDBOXED=1 lets LLM-written code run unconfined" in allowed
    assert "only the planner's own scripts run" in heuristic and "apt-get install bubblewrap" in heuristic
    assert sandbox._warned  # the runner does not repeat a generic warning
    assert sandbox.require_confinement(_policy_settings("docker"), True) is None  # docker confines itself


def test_llm_planner_with_working_bwrap_passes(monkeypatch) -> None:
    monkeypatch.setattr(sandbox, "probe_bwrap", lambda executable=None: (True, ""))
    assert sandbox.require_confinement(_policy_settings("conda"), True) is None
    assert sandbox.require_confinement(_policy_settings(), True) is None


class PluginCoder:
    """A plug-in coder that declares nothing: it is taken to write LLM code."""


class QuietCoder:
    writes_llm_code = False


def test_a_plugin_planner_that_writes_llm_code_is_confined_whatever_its_name(monkeypatch) -> None:
    """The sandbox follows the declared capability (planners/registry.py), not the name ``llm``."""
    from ftagent.core.errors import UserInputError
    from ftagent.planners import registry

    spec = registry.PlannerSpec(name="my-coder-planner", proposer="x:P", coder="x:C", feedback="x:F",
                                writes_llm_code=True)
    monkeypatch.setitem(registry.PLANNERS._objects, "my-coder-planner", spec)
    monkeypatch.setattr(sandbox, "probe_bwrap", lambda executable=None: (False, "bwrap is not installed"))
    assert registry.writes_llm_code("my-coder-planner") and not registry.writes_llm_code("heuristic")
    with pytest.raises(UserInputError, match="never runs unconfined"):
        sandbox.require_confinement(_policy_settings(), registry.writes_llm_code("my-coder-planner"))
    # a plug-in FT_CODER under the heuristic planner: confined unless it declares it writes no LLM code
    assert registry.writes_llm_code("heuristic", f"{__name__}:PluginCoder")
    assert not registry.writes_llm_code("llm", f"{__name__}:QuietCoder")
    with pytest.raises(UserInputError, match="unknown FT_PLANNER planner 'lm'.*Did you mean 'llm'"):
        registry.resolve_planner("lm", llm_configured=False)
    assert registry.resolve_planner("auto", llm_configured=False) == "heuristic"


RUN_ONLY_CONDA = """#!/bin/sh
# a conda that knows one env and runs commands (nothing written: it is read-only inside the sandbox)
if [ "$1" = env ]; then echo '{"envs": ["%s"]}'; exit 0; fi
shift 4  # run -n <env> --no-capture-output
exec "$@"
"""


@pytest.mark.skipif(not BWRAP_OK, reason=f"bubblewrap unusable here: {BWRAP_WHY}")
def test_conda_runner_is_confined_and_honours_mounts(tmp_path: Path) -> None:
    from ftagent.runners.conda import CondaRunner

    conda_home = tmp_path / "miniconda"
    (conda_home / "bin").mkdir(parents=True)
    (conda_home / "envs" / "ft-tools").mkdir(parents=True)
    exe = conda_home / "bin" / "conda"
    exe.write_text(RUN_ONLY_CONDA % (conda_home / "envs" / "ft-tools"))
    exe.chmod(0o755)
    file_path = tmp_path / "finetune_files"
    (file_path / "benchmarks" / "aime25").mkdir(parents=True)
    (file_path / "benchmarks" / "aime25" / "test.jsonl").write_text('{"question": "secret"}')
    (file_path / "datasets").mkdir()
    (file_path / "datasets" / "rows.json").write_text("[]")
    runner = CondaRunner("ft-tools", conda=str(exe), sandbox="bwrap")
    assert runner.sandboxed
    probe = (f"test -e {file_path / 'benchmarks'} && echo bench-visible; "
             f"cat {file_path / 'datasets' / 'rows.json'}; echo; echo x > out.txt && echo wd-writable; "
             f"(echo y > {file_path / 'datasets' / 'new'}) 2>/dev/null || echo datasets-read-only; echo HOME=$HOME")
    res = runner.run(["/bin/sh", "-c", probe], tool="data", workdir=tmp_path / "ws",
                     mounts=[Mount(source=file_path / "datasets")], timeout=60)
    assert res.ok, res.log_tail
    assert res.log_tail.splitlines() == ["[]", "wd-writable", "datasets-read-only", "HOME=/tmp"]
    assert (tmp_path / "ws" / "out.txt").read_text() == "x\n"


def test_every_tool_process_numbers_gpus_in_pci_order(fake_tools_env: Path, tmp_path: Path, monkeypatch) -> None:
    """Issue 42 item 6: NVML (core/hardware.py) lists GPUs in PCI bus order, CUDA FASTEST_FIRST unless told:
    a tool gets CUDA_DEVICE_ORDER=PCI_BUS_ID, whatever the caller's environment says (d350dfe passed the
    caller's value through, or none)."""
    from ftagent.runners.docker import DockerRunner

    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    res = _runner(fake_tools_env).run(
        ["python", "-c", "import os; print('ORDER=' + os.environ.get('CUDA_DEVICE_ORDER', 'unset'))"],
        tool="train", workdir=tmp_path, timeout=60)
    assert "ORDER=PCI_BUS_ID" in res.log_tail
    monkeypatch.delenv("CUDA_DEVICE_ORDER")
    assert passthrough_env({})["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert DockerRunner(use_gpu=True, client=object()).environment(None)["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_the_no_sandbox_warnings_give_the_install_hint_once(monkeypatch, caplog) -> None:
    """Issue 43: the warning read "(bwrap is not installed (apt-get install bubblewrap); apt-get install
    bubblewrap)": the real probe's reason, without bwrap on PATH, and every text built from it."""
    from ftagent.core.errors import UserInputError

    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    monkeypatch.setattr(sandbox, "_warned", False)
    sandbox.probe_bwrap.cache_clear()  # probed once per process: this test's probe finds no bwrap
    monkeypatch.setattr(sandbox, "probe_bwrap", functools.lru_cache(maxsize=4)(sandbox.probe_bwrap.__wrapped__))
    texts = [sandbox.require_confinement(_policy_settings(allow=True), True),
             sandbox.require_confinement(_policy_settings(), False)]
    with pytest.raises(UserInputError) as refused:
        sandbox.require_confinement(_policy_settings(), True)
    with pytest.raises(Exception) as strict:
        sandbox.use_sandbox("bwrap")
    monkeypatch.setattr(sandbox, "_warned", False)
    with caplog.at_level(logging.WARNING, logger="ftagent.runners.sandbox"):
        sandbox.warn_no_sandbox(sandbox.probe_bwrap()[1])
    texts += [str(refused.value), str(strict.value), caplog.records[-1].getMessage()]
    assert [t.count(sandbox.INSTALL_HINT) for t in texts] == [1] * 5, texts
