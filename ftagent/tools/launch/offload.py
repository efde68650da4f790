"""When a full fine-tune may be planned with DeepSpeed ZeRO-3 CPU offload, and with which optimizer.

Offload moves the fp32 master weights, the Adam moments and the optimizer step to the host. Its
optimizer is one of two (accelerate 1.11 ``accelerator.py`` ``_prepare_deepspeed``: with
``offload_optimizer.device`` set and ``zero_force_ds_cpu_optimizer`` true, DeepSpeed's default, the
Trainer's torch AdamW is swapped for ``deepspeed.ops.adam.DeepSpeedCPUAdam``):

* **DeepSpeedCPUAdam**, whose SIMD kernel DeepSpeed's ZeRO-Offload tutorial puts 5-7x ahead of torch's
  CPU Adam. It loads ``CPUAdamBuilder().load()``: a prebuilt ``deepspeed.ops.adam.cpu_adam_op`` when
  ``installed_ops["cpu_adam"]`` (``op_builder/builder.py`` ``OpBuilder.load``), else a JIT build that
  needs ninja and a C++ compiler (``OpBuilder.jit_load``) — neither is in the tool env or the image;
* **torch AdamW on the CPU** (``zero_force_ds_cpu_optimizer: false``): always works, several times slower.

So offload is planned only when it is asked for (``FT_CPU_OFFLOAD``: the user accepts the slow step) or
when the tool env has the CPU Adam op built (``DS_BUILD_CPU_ADAM=1`` at install: DeepSpeed's
``setup.py`` writes ``installed_ops`` into ``deepspeed/git_version_info_installed.py``); the flag is
then true again. Otherwise a full fine-tune that does not fit the GPUs is not offered (the memory table
says it does not fit, and LoRA is planned): offload nobody asked for never makes full fine-tuning look
better than LoRA.
"""

from __future__ import annotations

import ast
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

INSTALLED_INFO = "git_version_info_installed.py"  # DeepSpeed setup.py writes it at install time


class OffloadPolicy(BaseModel):
    """Whether ZeRO-3 CPU offload may be planned here, and whether DeepSpeed's CPU Adam is built."""

    model_config = ConfigDict(frozen=True)

    asked: bool = Field(False, description="FT_CPU_OFFLOAD: the user accepts the slow CPU optimizer step")
    cpu_adam: bool = Field(False, description="deepspeed.ops.adam.cpu_adam_op is built in the tool env")

    @property
    def allowed(self) -> bool:
        return self.asked or self.cpu_adam

    def reason_not(self) -> str:
        """Why a plan does not consider offload (empty when it does)."""
        if self.allowed:
            return ""
        return ("CPU offload not considered: FT_CPU_OFFLOAD is off and DeepSpeed's CPU Adam is not built in the "
                "tool env (torch's CPU AdamW would run the optimizer step several times slower)")


def _site_packages(tools_env: Path) -> list[Path]:
    return sorted(Path(tools_env).glob("lib/python3*/site-packages"))


def _installed_ops(info: Path) -> tuple[dict, str]:
    """``installed_ops`` and ``accelerator_name`` of DeepSpeed's generated info file (literals only)."""
    ops: dict = {}
    accelerator = ""
    try:
        tree = ast.parse(info.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return {}, ""
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                continue
            if node.targets[0].id == "installed_ops" and isinstance(value, dict):
                ops = value
            elif node.targets[0].id == "accelerator_name" and isinstance(value, str):
                accelerator = value
    return ops, accelerator


def cpu_adam_built(tools_env: Path) -> bool:
    """Whether the tool env's DeepSpeed has its CPU Adam op prebuilt for CUDA (read from files, nothing
    imported): ``installed_ops["cpu_adam"]`` with ``accelerator_name == "cuda"`` (``OpBuilder.load``'s
    own test) and the extension module on disk."""
    for site in _site_packages(tools_env):
        package = site / "deepspeed"
        ops, accelerator = _installed_ops(package / INSTALLED_INFO)
        if ops.get("cpu_adam") and accelerator == "cuda" and any((package / "ops" / "adam").glob("cpu_adam_op*.so")):
            return True
    return False


def offload_policy(*, asked: bool, tools_env: Path) -> OffloadPolicy:
    """The policy of a session or a plan: the user's ``FT_CPU_OFFLOAD`` and the tool env's DeepSpeed."""
    return OffloadPolicy(asked=asked, cpu_adam=cpu_adam_built(tools_env))
