"""Launch the GRPO script (:mod:`.grpo_script`) through a runner, as ``llamafactory-cli train`` is launched.

Same tool (``train``: the tool env, the sandbox and mounts of training), same log file, same stop event.
The script imports the benchmark's evaluator from ftagent's OpenCompass extension, so the package root is
on ``PYTHONPATH`` and mounted read-only (as for evaluation); the reward spec travels in ``FT_GRPO_REWARD``.
"""

from __future__ import annotations

import threading
from pathlib import Path

from ftagent.core.paths import package_root
from ftagent.core.types import RewardSpec
from ftagent.runners.base import Mount, Runner, RunResult
from ftagent.runners.scrubbed import run_scrubbed

SCRIPT = Path(__file__).with_name("grpo_script.py")
REWARD_ENV = "FT_GRPO_REWARD"


def grpo_env(reward: RewardSpec, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The GRPO run's environment: ftagent's package on the path, the reward spec as JSON."""
    return {**(extra or {}), "PYTHONPATH": str(package_root()), REWARD_ENV: reward.model_dump_json()}


def run_grpo(config_path: Path, runner: Runner, *, reward: RewardSpec, workdir: Path, mounts: list[Mount],
             env: dict[str, str], timeout: float | None, log_file: Path, gpus: str | None = None,
             stop: threading.Event | None = None) -> RunResult:
    """``python grpo_script.py <config>`` in the training tool env (``stop``: ends it early; the caller passes
    one only to a runner that takes it, ``trainer.accepts_stop``)."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    extra = {"stop": stop} if stop is not None else {}
    mounts = [*mounts, Mount(source=package_root() / "ftagent")]
    # scrubbed afterwards like every training run (ftagent.runners.scrubbed): ftagent reads the folder next
    return run_scrubbed(runner, ["python", str(SCRIPT), str(config_path)], tree=workdir, tool="train",
                        workdir=workdir, env=grpo_env(reward, env), mounts=mounts, gpus=gpus, timeout=timeout,
                        log_file=log_file, **extra)
