"""Multi-node training for one trial through LLaMA-Factory's Ray integration.

When a task asks for more GPUs than one node has, ``torchrun`` on a single node cannot serve it.
LLaMA-Factory (0.9.x) can instead start its trainer as Ray workers: with ``USE_RAY=1`` in the
environment, ``llamafactory-cli train`` reads ``ray_num_workers`` and ``ray_init_kwargs`` from the
YAML, connects to the cluster and places one worker per GPU in a ``PACK`` placement group (each
bundle asks for ``{"GPU": 1, "CPU": 10}`` in LLaMA-Factory 0.9.5: nodes must declare at least 10 CPUs
per GPU). This module only computes the YAML keys and environment variables; the trainer merges them
into its generated config and its subprocess environment.

The batch executors tell the trainer about such a task through environment variables
(:data:`ENV_TASK_GPUS`, :data:`ENV_NODE_GPUS`, ``RAY_ADDRESS``), see :func:`overrides_from_env`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

ENV_TASK_GPUS = "FT_RAY_TASK_GPUS"
ENV_NODE_GPUS = "FT_RAY_NODE_GPUS"
# Variables a multi-node NCCL run commonly needs; forwarded to the Ray workers when set.
_FORWARDED = ("NCCL_SOCKET_IFNAME", "NCCL_IB_DISABLE", "NCCL_DEBUG", "GLOO_SOCKET_IFNAME", "HF_HOME",
              "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")


def needs_multi_node(task_gpus: int, node_gpus: int) -> bool:
    """True when a task's GPUs cannot all come from one node."""
    _check(task_gpus, node_gpus)
    return task_gpus > node_gpus


def _check(task_gpus: int, node_gpus: int) -> None:
    if task_gpus < 0:
        raise ValueError(f"task_gpus must be >= 0, got {task_gpus}")
    if node_gpus < 1:
        raise ValueError(f"node_gpus must be >= 1 (GPUs of the largest node), got {node_gpus}")


def ray_training_overrides(task_gpus: int, node_gpus: int, *, address: str = "auto",
                           environ: Mapping[str, str] | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """YAML overrides and environment for one training run of ``task_gpus`` GPUs.

    Args:
        task_gpus: GPUs the trial trains on.
        node_gpus: GPUs of the largest node of the cluster.
        address: Ray address the trainer connects to (``auto``: the cluster of this node).
        environ: environment to take NCCL/HF settings from (default: ``os.environ``).

    Returns:
        ``(yaml_overrides, env)``: both empty when the task fits on one node (LLaMA-Factory then uses
        ``torchrun`` on that node as usual); otherwise ``ray_num_workers`` (one worker per GPU) and
        ``ray_init_kwargs`` for the YAML, and ``USE_RAY=1`` plus ``RAY_ADDRESS`` for the environment.

    Raises:
        ValueError: on a negative GPU count or a node without GPUs.
    """
    if not needs_multi_node(task_gpus, node_gpus):
        return {}, {}
    environ = os.environ if environ is None else environ
    worker_env = {k: environ[k] for k in _FORWARDED if environ.get(k)}
    init_kwargs: dict[str, Any] = {"address": address}
    if worker_env:
        init_kwargs["runtime_env"] = {"env_vars": worker_env}
    yaml_overrides = {"ray_num_workers": task_gpus, "ray_init_kwargs": init_kwargs}
    env = {"USE_RAY": "1", "RAY_ADDRESS": address, "FORCE_TORCHRUN": "0"}
    return yaml_overrides, env


def overrides_from_env(environ: Mapping[str, str] | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """:func:`ray_training_overrides` for the task this process runs in, as the executor set it up.

    Returns ``({}, {})`` unless the executor set :data:`ENV_TASK_GPUS` and :data:`ENV_NODE_GPUS`.
    """
    environ = os.environ if environ is None else environ
    try:
        task_gpus, node_gpus = int(environ[ENV_TASK_GPUS]), int(environ[ENV_NODE_GPUS])
    except (KeyError, ValueError):
        return {}, {}
    return ray_training_overrides(task_gpus, node_gpus, address=environ.get("RAY_ADDRESS") or "auto",
                                  environ=environ)
