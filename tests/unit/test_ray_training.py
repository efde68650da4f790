"""ray_training_overrides (multi-node LLaMA-Factory via USE_RAY) and the ray executor's resource logic."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftagent.jobs.ray_executor import cluster_gpus, task_gpus, task_options
from ftagent.jobs.ray_training import ENV_NODE_GPUS, ENV_TASK_GPUS, overrides_from_env, ray_training_overrides
from tests.unit.test_executors import make_plan


@pytest.mark.parametrize("task_gpus_, node_gpus", [(0, 8), (1, 1), (4, 8), (8, 8)])
def test_fits_on_one_node_changes_nothing(task_gpus_, node_gpus):
    assert ray_training_overrides(task_gpus_, node_gpus) == ({}, {})


def test_more_gpus_than_a_node_uses_llamafactory_ray():
    yaml, env = ray_training_overrides(16, 8, address="10.0.0.1:6379",
                                       environ={"NCCL_SOCKET_IFNAME": "eth0", "PATH": "/bin", "HF_HOME": ""})
    assert yaml == {"ray_num_workers": 16,
                    "ray_init_kwargs": {"address": "10.0.0.1:6379",
                                        "runtime_env": {"env_vars": {"NCCL_SOCKET_IFNAME": "eth0"}}}}
    assert env == {"USE_RAY": "1", "RAY_ADDRESS": "10.0.0.1:6379", "FORCE_TORCHRUN": "0"}
    yaml, _ = ray_training_overrides(3, 2, environ={})
    assert yaml == {"ray_num_workers": 3, "ray_init_kwargs": {"address": "auto"}}


@pytest.mark.parametrize("task_gpus_, node_gpus", [(-1, 8), (2, 0)])
def test_bad_counts_raise(task_gpus_, node_gpus):
    with pytest.raises(ValueError):
        ray_training_overrides(task_gpus_, node_gpus)


def test_overrides_from_env():
    assert overrides_from_env({}) == ({}, {})
    yaml, env = overrides_from_env({ENV_TASK_GPUS: "4", ENV_NODE_GPUS: "2", "RAY_ADDRESS": "h:6379"})
    assert yaml["ray_num_workers"] == 4 and env["RAY_ADDRESS"] == "h:6379" and env["USE_RAY"] == "1"
    assert overrides_from_env({ENV_TASK_GPUS: "2", ENV_NODE_GPUS: "2"}) == ({}, {})


def test_yaml_keys_exist_in_llamafactory():
    """The keys we write are RayArguments fields of the LLaMA-Factory we ship (when the tool env is here)."""
    import os

    root = Path(os.environ.get("FT_TOOLS_ENV", "/nonexistent"))
    src = next(root.glob("lib/python3*/site-packages/llamafactory/hparams/training_args.py"), None)
    if src is None:
        pytest.skip("no tool env with LLaMA-Factory (FT_TOOLS_ENV)")
    text = src.read_text()
    yaml, _ = ray_training_overrides(4, 2, environ={})
    for key in yaml:
        assert f"    {key}:" in text


def test_task_resources(tmp_path):
    plan = make_plan(tmp_path, [{"model": "a/a", "benchmark": "demo_add", "gpus": "0,1"},
                                {"model": "b/b", "benchmark": "demo_add"},
                                {"model": "c/c", "benchmark": "demo_add", "gpus": "2,3,4,5"}])
    big, cpu_only, huge = plan.tasks
    assert [task_gpus(t) for t in plan.tasks] == [2, 0, 4]
    opts, drop = task_options(big, node_gpus=2, max_retries=5, base_env={"FT_X": "1"})
    assert opts["num_gpus"] == 2 and opts["max_retries"] == 5 and opts["retry_exceptions"] is False
    assert opts["runtime_env"] == {"env_vars": {"FT_X": "1"}} and drop == ("CUDA_VISIBLE_DEVICES",)
    opts, _ = task_options(big, node_gpus=2, gpu_resource="fake_gpu")
    assert opts["resources"] == {"fake_gpu": 2} and "num_gpus" not in opts
    opts, _ = task_options(cpu_only, node_gpus=0)
    assert "num_gpus" not in opts and "resources" not in opts and opts["num_cpus"] == 1
    opts, _ = task_options(huge, node_gpus=2, cluster_address="10.0.0.1:6379")
    assert "num_gpus" not in opts and "resources" not in opts  # the trainer's Ray workers take the GPUs
    assert opts["runtime_env"]["env_vars"] == {ENV_TASK_GPUS: "4", ENV_NODE_GPUS: "2", "RAY_ADDRESS": "10.0.0.1:6379"}
    with pytest.raises(ValueError, match="no alive node has any"):
        task_options(big, node_gpus=0)


def test_cluster_gpus():
    nodes = [{"Alive": True, "Resources": {"CPU": 4, "GPU": 2}}, {"Alive": False, "Resources": {"GPU": 8}},
             {"Alive": True, "Resources": {"CPU": 8, "GPU": 4, "fake_gpu": 1}}]
    assert cluster_gpus(nodes, "GPU") == 4 and cluster_gpus(nodes, "fake_gpu") == 1 and cluster_gpus([], "GPU") == 0


def test_trainer_switches_to_ray_for_multi_node_tasks(monkeypatch):
    from ftagent.tools.llamafactory.early_stop import EarlyStopRule
    from ftagent.tools.llamafactory.trainer import LlamaFactoryTrainer

    off = EarlyStopRule(enabled=False)
    env: dict[str, str] = {}
    monkeypatch.delenv("FT_RAY_TASK_GPUS", raising=False)
    assert LlamaFactoryTrainer._run_extra(None, off, env, ray=True) == {} and env == {}
    monkeypatch.setenv("FT_RAY_TASK_GPUS", "16")
    monkeypatch.setenv("FT_RAY_NODE_GPUS", "8")
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert LlamaFactoryTrainer._run_extra(None, off, env, ray=False) == {} and env == {}  # a GRPO run: one process
    extra = LlamaFactoryTrainer._run_extra(None, off, env, ray=True)  # written into the run's own train.yaml
    assert extra["ray_num_workers"] == 16
    assert env["USE_RAY"] == "1"
