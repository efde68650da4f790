"""Issue 40 through the conda runner: what a DPO and a GRPO training command get, confined by real bubblewrap.

No real conda is installed here, so ``conda`` is a stand-in (as in test_runners_conda_docker.py) that, run by the
:class:`CondaRunner` inside its bubblewrap sandbox (``conda run -n <env> --no-capture-output <cmd>``), reports what
the stage's command would see instead of running it: its argv, the reward spec and ``PYTHONPATH`` in its
environment, whether ftagent's GRPO script and the benchmark's scorer module are readable (and read-only),
the config's data registration (``ranking: true`` for DPO pairs), the start weights, and whether the benchmark
folder (the test split) is visible. The commands come from the real trainer (``LlamaFactoryTrainer.train``:
its run folder, mounts and environment). NOT run: a real ``conda run`` (env activation, conda's own python)
and the training itself in a conda env (the Docker and local runners train for real:
tests/integration/test_docker_stages.py, test_stage_sessions.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from ftagent.core.settings import load_settings
from ftagent.core.types import CodeResult, RewardSpec, ScenarioInfo, ValidationReport
from ftagent.runners import sandbox
from ftagent.runners.conda import CondaRunner
from ftagent.tools.llamafactory.trainer import LlamaFactoryTrainer

BWRAP_OK, BWRAP_WHY = sandbox.probe_bwrap()
pytestmark = pytest.mark.skipif(not BWRAP_OK, reason=f"bubblewrap does not work here: {BWRAP_WHY}")

STAND_IN = r'''#!/usr/bin/env python3
import json, os, sys
args = sys.argv[1:]
if args[:3] == ["env", "list", "--json"]:
    print(json.dumps({"envs": ["/opt/conda/envs/ftagent-tools"]}))
    sys.exit(0)
cmd = args[args.index("--no-capture-output") + 1:]
config = cmd[-1]
text = open(config).read()
cfg = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line and not line.startswith(" "))
out_dir, data_dir = cfg["output_dir"].strip("'\""), cfg.get("dataset_dir", "").strip("'\"")
model = cfg["model_name_or_path"].strip("'\"")
seen = {"argv": cmd, "reward": os.environ.get("FT_GRPO_REWARD"), "pythonpath": os.environ.get("PYTHONPATH"),
        "bench_visible": os.path.exists(BENCH_FILE),
        "model_readable": os.path.isfile(os.path.join(model, "config.json")),
        "model_writable": os.access(model, os.W_OK)}
if cmd[0] == "python":
    script = cmd[1]
    scorer = os.path.join(os.environ["PYTHONPATH"], "ftagent", "tools", "opencompass", "oc_reward.py")
    seen.update(script_readable=os.path.isfile(script), script_writable=os.access(script, os.W_OK),
                scorer_readable=os.path.isfile(scorer))
if data_dir:
    info = os.path.join(data_dir, "dataset_info.json")
    seen["dataset_info"] = json.load(open(info)) if os.path.isfile(info) else None
    seen["rows"] = json.load(open(os.path.join(data_dir, "data.json")))
os.makedirs(out_dir, exist_ok=True)
json.dump(seen, open(os.path.join(out_dir, "probe.json"), "w"))
open(os.path.join(out_dir, "adapter_config.json"), "w").write("{}")
open(os.path.join(out_dir, "adapter_model.safetensors"), "w").write("")
with open(os.path.join(out_dir, "trainer_log.jsonl"), "w") as fh:
    fh.write(json.dumps({"current_steps": 1, "total_steps": 1, "loss": 0.5}) + "\n")
'''
PAIRS = [{"instruction": "What is 1 + 1?", "input": "", "chosen": "\\boxed{2}", "rejected": "\\boxed{3}"}] * 4
PROMPTS = [{"instruction": "What is 1 + 1?", "input": "", "output": "\\boxed{2}"}] * 4
REWARD = RewardSpec(benchmark="demo_add", evaluator="ftagent.tools.opencompass.oc_ext:BoxedIntAccEvaluator")


@pytest.mark.parametrize("stage", ["dpo", "grpo"])
def test_a_stage_command_under_the_conda_runner_gets_its_data_reward_and_no_benchmark(stage, tmp_path):
    conda = tmp_path / "conda" / "bin" / "conda"
    conda.parent.mkdir(parents=True)
    conda.write_text(STAND_IN.replace("BENCH_FILE", repr(str(tmp_path / "ff" / "benchmarks" / "demo_add" / "test" / "demo_add.jsonl"))))
    conda.chmod(0o755)
    ff, base = tmp_path / "ff", tmp_path / "ff" / "models" / "base"
    bench = ff / "benchmarks" / "demo_add" / "test"
    bench.mkdir(parents=True)
    (bench / "demo_add.jsonl").write_text('{"question": "1+1", "answer": "2"}\n')
    base.mkdir(parents=True)
    (base / "config.json").write_text("{}")
    ws = tmp_path / "ws" / "s" / "loop_0"
    ws.mkdir(parents=True)
    (ws / "data.json").write_text(json.dumps(PAIRS if stage == "dpo" else PROMPTS))
    config = {"stage": stage, "model_name_or_path": str(base), "dataset_dir": str(ws), "dataset": "ft_data",
              "finetuning_type": "lora", "max_steps": 1}
    (ws / "train.yaml").write_text(yaml.safe_dump(config))
    runner = CondaRunner(conda=str(conda), sandbox="bwrap")
    assert runner.sandboxed
    scenario = ScenarioInfo(benchmark="demo_add", base_model="base", base_model_path=str(base), file_path=str(ff),
                            workspace_root=str(tmp_path / "ws"))
    code = CodeResult(workspace=str(ws), stage=stage, reward=REWARD if stage == "grpo" else None)
    report = ValidationReport(passed=True, config_path=str(ws / "train.yaml"))
    result = LlamaFactoryTrainer(scenario, load_settings(file_path=str(ff)), runner).train(code, report, None)
    seen = json.loads((Path(result.model_path) / "probe.json").read_text())
    assert seen["model_readable"] and not seen["model_writable"]
    assert not seen["bench_visible"]  # FT_FILE_PATH is not mounted into a conda run
    if stage == "dpo":
        assert seen["argv"][:2] == ["llamafactory-cli", "train"] and seen["reward"] is None
        (info,) = seen["dataset_info"].values()
        assert info["ranking"] is True and info["columns"]["rejected"] == "rejected"
        assert seen["rows"] == PAIRS
    else:
        assert seen["argv"][0] == "python" and seen["argv"][1].endswith("ftagent/tools/trl/grpo_script.py")
        assert RewardSpec.model_validate_json(seen["reward"]) == REWARD
        assert seen["script_readable"] and not seen["script_writable"] and seen["scorer_readable"]
        assert seen["rows"] == PROMPTS
    assert result.stage == stage and os.path.isdir(result.model_path)
