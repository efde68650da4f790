"""Issue 40 through the Docker runner: a DPO and a GRPO loop validate and train inside the real tool image.

The product's own validate → approve → train path (``LlamaFactoryValidator``, ``finetune.approval``,
``LlamaFactoryTrainer``) on ``builtin/tiny-qwen2`` with a :class:`DockerRunner` (CPU image), two optimizer steps
per run, after the sampling step's own call (``sample_training_prompts``: 4 training prompts x 2 answers, the
evaluation's inference and the benchmark's scorer in an ``eval`` container, which must not see the prepared test
split either). Every ``train`` container is preceded by a probe container started with the *same* tool, workdir,
mounts and environment, which reports what the stage needs and what it must not see:

* DPO: the config's ``dataset_dir`` holds the checked pairs and LLaMA-Factory's ``dataset_info.json`` with
  ``ranking: true`` (else LLaMA-Factory reads the rows as SFT);
* GRPO: TRL's ``GRPOTrainer`` imports, the reward spec arrives in ``FT_GRPO_REWARD``, and the benchmark's own
  scorer (``oc_reward.AnswerScorer``, ftagent's package mounted read-only) scores a right and a wrong answer;
* both: the start weights are readable and read-only, and the benchmark folder (the test split) is not there.

Then each run's model is where the trainer says, a LoRA adapter, with a loss history (GRPO's with TRL's reward
column), all written by the calling user. Skipped without a Docker engine (``FTAGENT_REQUIRE_DOCKER=1``: a
failure); the tiny model is built in the same image, so no local tool env is needed. 70-200 s on 2 loaded cores.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import yaml

from ftagent.core.settings import load_settings
from ftagent.core.types import CodeResult, ScenarioInfo
from ftagent.finetune import approval
from ftagent.finetune.stage_prepare import StagePreparer
from ftagent.models.builtin import build_builtin
from ftagent.runners.base import RunResult
from ftagent.runners.docker import DockerRunner
from ftagent.tools.llamafactory.catalogue import read_catalogue
from ftagent.tools.llamafactory.trainer import LlamaFactoryTrainer
from ftagent.tools.llamafactory.validator import LlamaFactoryValidator
from ftagent.tools.opencompass import provides  # noqa: F401 - registers ftagent's evaluators, as a session's start-up does
from ftagent.tools.opencompass.sampling import sample_training_prompts
from tests.helpers.resolved_run import resolved_run
from tests.integration.test_docker_runner import engine, tool_image  # noqa: F401 - the module's fixtures

pytestmark = pytest.mark.integration
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llamafactory"

PROBE = r"""
import json, os, sys, yaml
config_path, bench = sys.argv[1], sys.argv[2]
cfg = yaml.safe_load(open(config_path))
out = {"uid": os.getuid()}
data_dir = cfg.get("dataset_dir")
if data_dir:
    info_path = os.path.join(data_dir, "dataset_info.json")
    out["dataset_info"] = json.load(open(info_path)) if os.path.isfile(info_path) else None
    out["rows"] = json.load(open(os.path.join(data_dir, cfg.get("dataset_file") or "data.json")))
model = cfg["model_name_or_path"]
out["model_readable"] = os.path.isfile(os.path.join(model, "config.json"))
try:
    open(os.path.join(model, "probe-write"), "w").close()
    out["model_writable"] = True
except OSError:
    out["model_writable"] = False
out["bench_exists"] = os.path.exists(bench)
out["bench_listing"] = sorted(os.listdir(bench)) if os.path.isdir(bench) else None
out["test_split_visible"] = any(os.path.exists(os.path.join(bench, "demo_add", "test", f)) for f in ("demo_add.jsonl", "default.jsonl"))
if "FT_GRPO_REWARD" in os.environ:
    import trl
    from trl import GRPOTrainer  # noqa: F401
    from ftagent.tools.opencompass.oc_reward import AnswerScorer
    scorer = AnswerScorer(json.loads(os.environ["FT_GRPO_REWARD"]))
    out["trl"] = trl.__version__
    out["scores"] = scorer.score(["The sum is \\boxed{57}", "The sum is \\boxed{56}"], ["\\boxed{57}", "\\boxed{57}"])
print("PROBE " + json.dumps(out))
"""


EVAL_PROBE = "import os, sys; print('EVAL bench', os.path.exists(sys.argv[1]))"


class ProbingRunner:
    """A :class:`DockerRunner` that, before each ``train`` command, runs :data:`PROBE` in a container with the
    same tool, workdir, mounts and environment (capabilities are the inner runner's: ``inner``)."""

    name = "docker"

    def __init__(self, inner: DockerRunner, bench: Path) -> None:
        self.inner, self.bench = inner, bench
        self.seen: list[dict] = []
        self.eval_seen: list[str] = []
        self.commands: list[list[str]] = []

    def run(self, cmd: list[str], *, tool, workdir: Path, env=None, mounts=None, gpus=None, timeout=None,
            log_file=None, **kw) -> RunResult:
        if tool == "eval":  # the sampling run: the prepared test split must not be in its container either
            probe = self.inner.run(["python", "-c", EVAL_PROBE, str(self.bench)], tool=tool, workdir=workdir, env=env,
                                   mounts=mounts, timeout=300)
            assert probe.ok, probe.log_tail
            self.eval_seen.append(probe.log_tail.strip().splitlines()[-1])
        if tool == "train":
            self.commands.append(list(cmd))
            probe = self.inner.run(["python", "-c", PROBE, cmd[-1], str(self.bench)], tool=tool, workdir=workdir,
                                   env=env, mounts=mounts, timeout=300)
            assert probe.ok, probe.log_tail
            line = next(x for x in probe.log_tail.splitlines() if x.startswith("PROBE "))
            self.seen.append(json.loads(line[len("PROBE "):]))
        return self.inner.run(cmd, tool=tool, workdir=workdir, env=env, mounts=mounts, gpus=gpus, timeout=timeout,
                              log_file=log_file, **kw)


@pytest.fixture(scope="module")
def docker_model(engine, tool_image, tmp_path_factory) -> Path:  # noqa: F811 - pytest's fixture injection
    """``builtin/tiny-qwen2`` built by the image's own python (no local tool env)."""
    root = tmp_path_factory.mktemp("ff")
    runner = DockerRunner(use_gpu=False, client=engine, image=tool_image, shm_size="1g")
    return build_builtin("tiny-qwen2", root / "models" / "builtin" / "tiny-qwen2", runner)


PAIRS = [{"instruction": f"What is {a} + {b}? Put the final answer in \\boxed{{}}.", "input": "",
          "chosen": f"\\boxed{{{a + b}}}", "rejected": f"\\boxed{{{a + b + 1}}}"} for a, b in
         [(12, 30), (45, 11), (23, 23), (70, 18), (31, 52), (64, 27), (19, 40), (55, 33)]]
PROMPTS = [{"instruction": p["instruction"], "input": "", "output": p["chosen"]} for p in PAIRS]
CONFIGS = {
    "dpo": {"finetuning_type": "lora", "learning_rate": 1e-4, "max_steps": 2, "per_device_train_batch_size": 2,
            "gradient_accumulation_steps": 1, "pref_beta": 0.1, "logging_steps": 1, "cutoff_len": 64},
    "grpo": {"finetuning_type": "lora", "learning_rate": 1e-5, "max_steps": 2, "per_device_train_batch_size": 2,
             "gradient_accumulation_steps": 1, "num_generations": 2, "max_completion_length": 8, "logging_steps": 1,
             "beta": 0.04, "cutoff_len": 64},
}


def _loop(stage: str, loop: int, ff: Path, model: Path, runner: ProbingRunner, settings) -> tuple[CodeResult, object]:
    """Validate, approve and train one ``stage`` loop whose data script wrote ``rows``; the trained result."""
    root = ff.parent / "ws"
    ws = root / "s" / f"loop_{loop}"
    ws.mkdir(parents=True)
    rows = PAIRS if stage == "dpo" else PROMPTS
    (ws / "process_data.py").write_text("print('the stage rows')\n")
    (ws / "data.json").write_text(json.dumps(rows))
    (ws / "train.yaml").write_text(yaml.safe_dump(CONFIGS[stage]))
    scenario = ScenarioInfo(benchmark="demo_add", base_model="builtin/tiny-qwen2", base_model_path=str(model),
                            file_path=str(ff), workspace_root=str(root))
    run = resolved_run(file_path=ff)
    reward = StagePreparer(scenario, settings, runner, run=run, data=None).reward() if stage == "grpo" else None
    code = CodeResult(workspace=str(ws), files={"process_data.py": str(ws / "process_data.py")}, stage=stage,
                      reward=reward)
    frozen, data_dir = approval.frozen_dir(root, "s", loop), approval.data_run_dir(root, "s", loop)
    approval.freeze_code(code, frozen)
    report = LlamaFactoryValidator(scenario, settings, runner, catalogue=read_catalogue(FIXTURES)).validate(code, None)
    assert report.passed, report.failure
    report.approved = approval.approve(code, report, frozen, data_dir)
    approval.prepare_data_run(code, report.approved)
    (data_dir / "data.json").write_text(json.dumps(rows))
    approval.seal_data(report.approved, "pairwise" if stage == "dpo" else "alpaca")
    return code, LlamaFactoryTrainer(scenario, settings, runner).train(code, report, None)


def test_dpo_and_grpo_validate_and_train_inside_the_tool_image(engine, tool_image, docker_model,  # noqa: F811
                                                               tmp_path: Path) -> None:
    ff = tmp_path / "ff"
    bench = ff / "benchmarks"
    resolved_run(file_path=ff).adapter.prepare(bench, limit=10)  # the splits exist: the test split must stay out
    assert any((bench / "demo_add" / "test").glob("*.jsonl"))
    settings = load_settings(file_path=str(ff), full_timeout=600)
    runner = ProbingRunner(DockerRunner(benchmarks_dir=bench, use_gpu=False, client=engine, image=tool_image,
                                        shm_size="1g"), bench)
    start = time.monotonic()  # the sampling step's inference and scoring, in a container
    rows = [{"prompt": p["instruction"], "gold": p["chosen"]} for p in PAIRS[:4]]
    samples = sample_training_prompts(docker_model, rows=rows, samples_per_prompt=2, temperature=1.0,
                                      benchmark=resolved_run(file_path=ff).adapter, settings=settings, runner=runner,
                                      work_dir=tmp_path / "sampling", items_root=bench, timeout=600)
    walls = {"sampling": round(time.monotonic() - start, 1)}
    assert len(samples) == 8 and {s["score"] for s in samples} <= {0.0, 1.0}, samples
    assert runner.eval_seen and all(line == "EVAL bench False" for line in runner.eval_seen), runner.eval_seen
    for loop, stage in enumerate(("dpo", "grpo")):
        start = time.monotonic()
        _, result = _loop(stage, loop, ff, docker_model, runner, settings)
        walls[stage] = round(time.monotonic() - start, 1)
        model = Path(result.model_path)
        assert result.stage == stage and (model / "adapter_config.json").is_file(), list(model.iterdir())
        assert result.loss_history, f"{stage}: no loss history"
        if stage == "grpo":
            assert any("reward" in p for p in result.loss_history), result.loss_history
        me = (os.getuid(), os.getgid())
        assert all((p.lstat().st_uid, p.lstat().st_gid) == me for p in model.rglob("*"))
    # two train containers per stage (the validator's micro run, the training), each probed first
    assert [c[0] for c in runner.commands] == ["llamafactory-cli", "llamafactory-cli", "python", "python"], runner.commands
    assert all(c[1].endswith("grpo_script.py") for c in runner.commands[2:])
    for seen in runner.seen:
        assert seen["model_readable"] and not seen["model_writable"]
        assert not seen["test_split_visible"] and seen["bench_listing"] in (None, []), seen
        assert seen["uid"] == os.getuid()
    for seen in runner.seen[:2]:  # DPO: LLaMA-Factory reads the rows as pairs only with ranking: true
        (info,) = seen["dataset_info"].values()
        assert info.get("ranking") is True and info["columns"]["chosen"] == "chosen", info
        assert seen["rows"] and all({"chosen", "rejected"} <= set(r) for r in seen["rows"])
    for seen in runner.seen[2:]:  # GRPO: TRL and the benchmark's own scorer inside the container
        assert seen["trl"].startswith("0.") and seen["scores"] == [1.0, 0.0], seen
        assert all("output" in r for r in seen["rows"])
    print(json.dumps({"docker_stage_wall_s": walls}))
