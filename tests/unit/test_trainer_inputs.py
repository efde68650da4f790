"""Issue 39, red team breaches B1 and B2: the trainer reads only approved inputs, and no train.yaml key names a path.

B1: the debug data run planted a checkpoint in the workspace and ``resume_from_checkpoint`` pointed the trainer at it
(transformers ``Trainer._load_from_checkpoint``); the validator kept the key. B2: the trainer's datasets cache lived in
the workspace, and ``datasets`` keys a local JSON file's cache by path and mtime, so a planted entry stood in for the
scanned ``data.json``. The rules tested here (docs/trust.md, rule 8):

* every key a plan may set is a value (LLaMA-Factory's and TRL's own field types) or a listed text key; every other
  key, written with a value, fails validation with CONFIG (:mod:`ftagent.tools.llamafactory.planner_keys`);
* the template check, the micro-batch and the full training (every stage) run in a fresh folder beside the
  workspace, with copies of what was checked read-only, and never bind the workspace
  (:mod:`ftagent.runners.fresh`): checked through real bubblewrap, with a probe in place of ``llamafactory-cli``
  that reports what the sandboxed process can see and write.

On 3106b5b (before the fix): the validator kept ``resume_from_checkpoint``, ``tokenized_path`` and friends were only
removed when ``manage_config`` knew them, and the probe saw the workspace (with the planted checkpoint and cache) from
both the micro-batch and the full training, whose datasets cache was the workspace's ``.cache/datasets``.
The red team's own test of B1 (the validated config never resumes from a checkpoint) is in
tests/unit/test_redteam39_weights.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ftagent.core.errors import ErrorType
from ftagent.core.hardware import HardwareInfo
from ftagent.core.settings import load_settings
from ftagent.core.types import CodeResult, ScenarioInfo
from ftagent.finetune import approval
from ftagent.runners import sandbox
from ftagent.runners.base import RunResult
from ftagent.runners.local import LocalRunner
from ftagent.tools.llamafactory.catalogue import LFCatalogue, LFParam, read_catalogue
from ftagent.tools.llamafactory.config import filter_config, load_lf_defaults, manage_config, system_keys
from ftagent.tools.llamafactory.planner_keys import is_value_type
from ftagent.tools.llamafactory.trainer import LlamaFactoryTrainer
from ftagent.tools.llamafactory.validator import LlamaFactoryValidator
from ftagent.tools.trl.config import filter_grpo_config

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llamafactory"
BWRAP_OK, BWRAP_WHY = sandbox.probe_bwrap()
ROW = {"instruction": "What is 1 + 1?", "input": "", "output": "2"}
#: the keys the red team and the issue name, and others of their kind (each names a file or folder a run would read)
PATH_KEYS = ("resume_from_checkpoint", "cache_dir", "tokenized_path", "adapter_name_or_path", "adapter_folder",
             "accelerator_config", "fsdp_config", "generation_config", "hyper_parallel_args",
             "export_dir", "offload_folder", "media_dir", "profiler_output_dir", "new_special_tokens_config",
             "ref_model", "reward_model", "kt_weight_path", "hf_hub_token")


@pytest.fixture(scope="module")
def catalogue() -> LFCatalogue:
    return read_catalogue(FIXTURES)


# --- no key names a path ------------------------------------------------------------------------------------------

def test_every_key_a_plan_keeps_is_a_value_a_listed_text_or_the_systems(catalogue):
    """By construction, over LLaMA-Factory's whole catalogue and TRL's GRPOConfig: a key survives the filter only
    when its type admits no free text, or it is one of defaults.yaml's text keys, or the system replaces it."""
    defaults = load_lf_defaults()
    text, system = set(defaults.text_keys), system_keys(defaults)
    for params, filt in ((catalogue.parameters, lambda c: filter_config(c, catalogue)),
                         (catalogue.grpo_parameters, lambda c: filter_grpo_config(c, catalogue))):
        for name, param in params.items():
            kept, dropped = filt({name: "/ws/loop_0/planted"})
            if name in kept:
                assert is_value_type(param.type) or name in text or name in system or name in (
                    "dataset_file", "use_vllm", "vllm_gpu_memory_utilization"), (name, param.type)
            elif not any(d.reason.startswith(("a mapping", "a nested", "not a valid")) for d in dropped):
                assert [d.refused for d in dropped] == [True], (name, dropped)
    for key in PATH_KEYS:
        kept, dropped = filter_config({key: "/ws/loop_0/ckpt"}, catalogue)
        assert kept == {} and dropped[0].refused, key
    # the system's own keys pass the filter, then are replaced or removed: no planner path reaches a run (the
    # DeepSpeed file is launch.choose_deepspeed's: a shipped config or none, tests/unit/test_launch.py)
    for name in sorted(system - {"deepspeed"}):
        kept, _ = filter_config({name: "/ws/loop_0/planted"}, catalogue)
        final = manage_config(kept, workspace=Path("/ws/loop_0"), base_model_path="/models/base",
                              hardware=HardwareInfo(), n_samples=100).config
        assert final.get(name) != "/ws/loop_0/planted", name
    # a string-typed key a future LLaMA-Factory adds is refused until someone lists it
    future = catalogue.model_copy(update={"parameters": {**catalogue.parameters, "warm_start_path": LFParam(
        name="warm_start_path", type="str | None")}})
    assert filter_config({"warm_start_path": "/ws/loop_0/ckpt"}, future)[1][0].refused
    # keys that ask for nothing are dropped, not refused (LLaMA-Factory's examples write resume_from_checkpoint: null)
    kept, dropped = filter_config({"resume_from_checkpoint": None, "cache_dir": ""}, catalogue)
    assert kept == {} and not any(d.refused for d in dropped)
    # the GRPO stage: TRL's from_pretrained keywords and a DeepSpeed file are paths too
    kept, dropped = filter_grpo_config({"model_init_kwargs": {"cache_dir": "/ws"}, "deepspeed": "/ws/ds.json",
                                        "loss_type": "dr_grpo", "beta": 0.04}, catalogue)
    assert kept == {"loss_type": "dr_grpo", "beta": 0.04} and all(d.refused for d in dropped)


class _NoRun:
    name = "none"

    def run(self, *args, **kwargs):  # pragma: no cover - reached only when a refused config ran
        raise AssertionError("a refused config reached a run")


def test_a_path_key_fails_validation_with_config_before_anything_runs(catalogue, tmp_path):
    ws = tmp_path / "ws" / "loop_0"
    ws.mkdir(parents=True)
    (ws / "data.json").write_text(json.dumps([ROW] * 4))
    (ws / "train.yaml").write_text(yaml.safe_dump({"learning_rate": 1e-4, "resume_from_checkpoint": str(ws / "ckpt"),
                                                   "tokenized_path": str(ws / "tok"), "cache_dir": None}))
    scenario = ScenarioInfo(benchmark="demo", base_model="m", base_model_path="/models/m", file_path=str(tmp_path),
                            workspace_root=str(tmp_path / "ws"))
    report = LlamaFactoryValidator(scenario, load_settings(file_path=str(tmp_path)), runner=_NoRun(),
                                   catalogue=catalogue).validate(CodeResult(workspace=str(ws)), None)
    failure = report.failure
    assert failure is not None and failure.error_type is ErrorType.CONFIG
    assert f"resume_from_checkpoint: {ws / 'ckpt'}" in failure.message and "tokenized_path" in failure.message
    assert "cache_dir" not in failure.message and "Remove resume_from_checkpoint, tokenized_path" in failure.suggestion
    assert failure.details["refused_keys"] == ["resume_from_checkpoint", "tokenized_path"]


# --- what the sandboxed trainer sees ---------------------------------------------------------------------------------

PROBE = r"""
import json, os, sys
cfg, workspace, output, data, model = sys.argv[1:6]
def writable(path):
    try:
        with open(path, "a"):
            return True
    except OSError:
        return False
seen = {
    "cwd": os.getcwd(),
    "cwd_files": sorted(os.path.join(d, f) for d, _, fs in os.walk(".") for f in fs),
    "workspace": os.path.exists(workspace), "planted_ckpt": os.path.exists(os.path.join(workspace, "ckpt")),
    "data_files": sorted(os.listdir(data)), "rows": len(json.load(open(os.path.join(data, "data.json")))),
    "data_writable": writable(os.path.join(data, "data.json")), "config_writable": writable(cfg),
    "model_writable": writable(os.path.join(model, "x")),
    "env": {k: os.environ.get(k) for k in ("HF_HOME", "HF_DATASETS_CACHE", "TRITON_CACHE_DIR", "TMPDIR",
                                            "TORCHINDUCTOR_CACHE_DIR", "XDG_CACHE_HOME")},
    "datasets_cache": os.listdir(os.environ["HF_DATASETS_CACHE"]),
}
os.makedirs(output, exist_ok=True)
json.dump(seen, open(os.path.join(output, "probe.json"), "w"))
for step in (1, 2, 3):
    open(os.path.join(output, "trainer_log.jsonl"), "a").write(json.dumps({"current_steps": step, "loss": 1.0}) + "\n")
json.dump({"global_step": 3, "log_history": []}, open(os.path.join(output, "trainer_state.json"), "w"))
open(os.path.join(output, "config.json"), "w").write("{}")
open(os.path.join(output, "model.safetensors"), "wb").write(b"")
"""


class ProbeRunner:
    """The real local runner under real bubblewrap, running :data:`PROBE` where ``llamafactory-cli train`` would run,
    with the workdir, mounts and environment ftagent gave the trainer."""

    name = "local"
    sandboxed = True

    def __init__(self, tools_env: Path, workspace: Path) -> None:
        self.inner = LocalRunner(tools_env, sandbox="bwrap", gpu=False)
        self.workspace = workspace
        self.seen: list[dict] = []

    def run(self, cmd, *, tool, workdir, env=None, mounts=None, gpus=None, timeout=None, log_file=None, stop=None):
        assert cmd[:2] == ["llamafactory-cli", "train"], cmd
        config = yaml.safe_load(Path(cmd[2]).read_text())
        argv = ["python", "-c", PROBE, cmd[2], str(self.workspace), config["output_dir"], config["dataset_dir"],
                config["model_name_or_path"]]
        result: RunResult = self.inner.run(argv, tool=tool, workdir=workdir, env=env, mounts=mounts, timeout=120,
                                           log_file=log_file)
        assert result.ok, result.log_tail
        self.seen.append(json.loads((Path(config["output_dir"]) / "probe.json").read_text()))
        return result


@pytest.fixture
def tool_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    env = tmp_path_factory.mktemp("toolenv") / "tools"  # the probe needs only Python
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(env)],
                   check=True, timeout=120)
    return env


def _plant(ws: Path) -> None:
    """What the red team's debug run left: a checkpoint, a datasets cache, a stand-in ``json`` loader folder."""
    for rel in ("ckpt/model.safetensors", "ckpt/trainer_state.json", ".cache/datasets/json/planted.arrow",
                "json/json.py", "debug/output/model.safetensors"):
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text("planted")


def _assert_confined(seen: dict, *, workspace: Path, rows: int) -> None:
    work = Path(seen["cwd"])
    assert not seen["workspace"] and not seen["planted_ckpt"], f"the trainer saw the workspace {workspace}"
    assert work.name == "run" and workspace not in work.parents and work != workspace
    assert seen["cwd_files"] == [], seen["cwd_files"]  # a fresh, empty folder
    assert all(Path(v).is_relative_to(work) for v in seen["env"].values()), seen["env"]
    assert seen["datasets_cache"] == []
    # its inputs: the checked data, its registration and the config it runs (train_micro.yaml or train.yaml)
    assert [f for f in seen["data_files"] if not f.endswith(".yaml")] == ["data.json", "dataset_info.json"]
    assert seen["rows"] == rows
    assert not seen["data_writable"] and not seen["config_writable"] and not seen["model_writable"]


@pytest.mark.skipif(not BWRAP_OK, reason=f"bubblewrap does not work here: {BWRAP_WHY}")
def test_the_micro_batch_and_the_training_see_only_approved_inputs(catalogue, tool_env, tmp_path):
    root = tmp_path / "ws"
    ws, base = root / "s" / "loop_0", tmp_path / "models" / "base"
    ws.mkdir(parents=True)
    base.mkdir(parents=True)
    (base / "config.json").write_text("{}")
    (ws / "process_data.py").write_text("print('validated')\n")
    (ws / "data.json").write_text(json.dumps([ROW] * 4))
    (ws / "train.yaml").write_text(yaml.safe_dump({"learning_rate": 1e-4, "finetuning_type": "lora"}))
    _plant(ws)
    scenario = ScenarioInfo(benchmark="demo", base_model="base", base_model_path=str(base), file_path=str(tmp_path),
                            workspace_root=str(root))
    settings = load_settings(file_path=str(tmp_path))
    runner = ProbeRunner(tool_env, ws)
    code = CodeResult(workspace=str(ws), files={"process_data.py": str(ws / "process_data.py")})
    frozen, data_dir = approval.frozen_dir(root, "s", 0), approval.data_run_dir(root, "s", 0)
    approval.freeze_code(code, frozen)
    report = LlamaFactoryValidator(scenario, settings, runner, catalogue=catalogue).validate(code, None)
    assert report.passed, report.failure
    _assert_confined(runner.seen[0], workspace=ws, rows=4)
    # the workflow's steps between validation and training: freeze, the full data run's folder, its data sealed
    report.approved = approval.approve(code, report, frozen, data_dir)
    approval.prepare_data_run(code, report.approved)
    (data_dir / "data.json").write_text(json.dumps([ROW] * 7))
    approval.seal_data(report.approved)
    _plant(ws)  # again: a later round's debug run (the workspace stays the data script's)
    result = LlamaFactoryTrainer(scenario, settings, runner).train(code, report, None)
    _assert_confined(runner.seen[1], workspace=ws, rows=7)
    model = Path(result.model_path)
    assert model == root / "s" / "train" / "loop_0" / "run" / "output" and (model / "probe.json").is_file()
    assert not (model.parent / "cache").exists() and not (model.parent / "tmp").exists()  # dropped after the run
