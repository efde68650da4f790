"""Issue 42 item 1: ZeRO-3 CPU offload is planned only when asked for (FT_CPU_OFFLOAD) or when DeepSpeed's
CPU Adam op is built in the tool env — read from the files DeepSpeed's setup.py writes, nothing imported."""

from __future__ import annotations

from pathlib import Path

from ftagent.tools.launch.offload import OffloadPolicy, cpu_adam_built, offload_policy


def _deepspeed(env: Path, *, cpu_adam: object, accelerator: str = "cuda", module: bool = True) -> Path:
    package = env / "lib" / "python3.11" / "site-packages" / "deepspeed"
    (package / "ops" / "adam").mkdir(parents=True)
    # the file DeepSpeed's setup.py writes (version, git_hash, git_branch, installed_ops, accelerator_name, ...)
    (package / "git_version_info_installed.py").write_text(
        "version='0.19.8'\ngit_hash='abc'\ngit_branch='master'\n"
        f"installed_ops={{'async_io': False, 'cpu_adam': {cpu_adam!r}, 'fused_adam': False}}\n"
        f"accelerator_name='{accelerator}'\ntorch_info={{'version': '2.13', 'cuda_version': '12.8'}}\n",
        encoding="utf-8")
    if module:
        (package / "ops" / "adam" / "cpu_adam_op.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF")
    return env


def test_built_cpu_adam_is_found(tmp_path: Path) -> None:
    assert cpu_adam_built(_deepspeed(tmp_path / "a", cpu_adam=1))
    assert cpu_adam_built(_deepspeed(tmp_path / "b", cpu_adam=True))


def test_a_jit_only_or_foreign_build_is_not(tmp_path: Path) -> None:
    assert not cpu_adam_built(_deepspeed(tmp_path / "jit", cpu_adam=False))  # the pip sdist: JIT at first use
    assert not cpu_adam_built(_deepspeed(tmp_path / "cpu", cpu_adam=1, accelerator="cpu"))  # OpBuilder.load: JIT
    assert not cpu_adam_built(_deepspeed(tmp_path / "gone", cpu_adam=1, module=False))
    assert not cpu_adam_built(tmp_path / "no-env")


def test_the_policy() -> None:
    assert not OffloadPolicy().allowed and "FT_CPU_OFFLOAD" in OffloadPolicy().reason_not()
    assert OffloadPolicy(asked=True).allowed and OffloadPolicy(cpu_adam=True).allowed
    assert OffloadPolicy(cpu_adam=True).reason_not() == ""


def test_policy_of_a_tool_env(tmp_path: Path) -> None:
    env = _deepspeed(tmp_path / "env", cpu_adam=1)
    assert offload_policy(asked=False, tools_env=env) == OffloadPolicy(asked=False, cpu_adam=True)
    assert offload_policy(asked=True, tools_env=tmp_path / "none") == OffloadPolicy(asked=True, cpu_adam=False)
