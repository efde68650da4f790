"""Real LLaMA-Factory on CPU: catalogue, validation (micro-batch), full and LoRA training, merge.

Sized for a contended 2-core machine: 400 arithmetic rows, cutoff_len 64, ≤100 steps.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest
import yaml

from ftagent.core.errors import ErrorType, StepError
from ftagent.core.settings import load_settings
from ftagent.core.types import CodeResult, ScenarioInfo
from ftagent.runners.local import LocalRunner
from ftagent.tools.llamafactory.catalogue import load_or_build_catalogue, read_catalogue
from ftagent.tools.llamafactory.trainer import (
    LlamaFactoryTrainer,
    model_kind,
    run_data_processing,
)
from ftagent.tools.llamafactory.validator import LlamaFactoryValidator

pytestmark = pytest.mark.integration

BASE = {"template": "chatml", "cutoff_len": 64, "learning_rate": 1.0e-3, "lr_scheduler_type": "cosine",
        "save_strategy": "no"}


def _rows(n: int = 400, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        out.append({"instruction": f"What is {a} + {b}?", "input": "", "output": f"\\boxed{{{a + b}}}"})
    return out


def _workspace(root: Path, name: str, config: dict) -> Path:
    ws = root / name
    ws.mkdir(parents=True)
    (ws / "data.json").write_text(json.dumps(_rows()))
    (ws / "train.yaml").write_text(yaml.safe_dump(config))
    return ws


@pytest.fixture(scope="module")
def runner(tools_env: Path) -> LocalRunner:
    return LocalRunner(tools_env, sandbox="auto", gpu=False)


@pytest.fixture(scope="module")
def env(tiny_model: Path, runner: LocalRunner, tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("lf")
    info = root / "file_path" / ".llama_factory_info"
    start = time.monotonic()
    load_or_build_catalogue(info, runner)
    print(f"catalogue build: {time.monotonic() - start:.1f}s")
    scen = ScenarioInfo(benchmark="demo", base_model="builtin/tiny-qwen2", base_model_path=str(tiny_model),
                        file_path=str(root / "file_path"), workspace_root=str(root),
                        llama_factory_info_dir=str(info))
    return root, scen, load_settings(file_path=str(root / "file_path"))


def _validate(env, runner, ws: Path):
    _, scen, settings = env
    start = time.monotonic()
    report = LlamaFactoryValidator(scen, settings, runner=runner).validate(CodeResult(workspace=str(ws)), None)
    print(f"validate {ws.name}: {time.monotonic() - start:.1f}s")
    return report


def test_catalogue_is_refreshed_when_version_changes(env, runner: LocalRunner) -> None:
    info = Path(env[1].llama_factory_info_dir)
    cat = read_catalogue(info)
    assert cat.version.startswith("0.9") and cat.knows("lora_rank") and "chatml" in cat.templates
    for name in ("constants.json", "parameters.json"):
        data = json.loads((info / name).read_text())
        data["llamafactory_version"] = "0.0.0-stale"
        (info / name).write_text(json.dumps(data))
    assert load_or_build_catalogue(info, runner).version == cat.version


def test_full_finetune_validate_then_train(env, runner: LocalRunner) -> None:
    root, scen, settings = env
    ws = _workspace(root, "full", {**BASE, "finetuning_type": "full", "per_device_train_batch_size": 32,
                                   "max_steps": 100, "logging_steps": 10, "warmup_ratio": 0.05,
                                   "model_name_or_path": "/planner/should/not/choose"})
    report = _validate(env, runner, ws)
    assert report.passed, report.failure
    assert report.micro_batch["steps_logged"] >= 1 and all(x == x for x in report.micro_batch["losses"])
    assert not (ws / "output").exists()  # the micro-batch wrote only in its own folder
    # its own fresh folder beside the workspace (issue 39, red team B1/B2); its saved model is removed, its loss
    # history kept (issue 30)
    debug_out = Path(report.micro_batch["output_dir"])
    assert debug_out == root / "validate" / ws.name / "micro" / "run" / "output"
    print("micro-batch output after validate:", sorted(p.name for p in debug_out.iterdir()))
    assert not list(debug_out.rglob("*.safetensors")) and (debug_out / "trainer_state.json").is_file()
    final = yaml.safe_load((ws / "train.yaml").read_text())
    assert final["model_name_or_path"] == scen.base_model_path
    assert final["warmup_ratio"] == 0.05 and "warmup_steps" not in final  # trained as asked (ratio of the real run)
    start = time.monotonic()
    result = LlamaFactoryTrainer(scen, settings, runner=runner).train(CodeResult(workspace=str(ws)), report,
                                                                     None)
    print(f"full FT 100 steps: {time.monotonic() - start:.1f}s (train_runtime {result.train_runtime_s}s)")
    assert result.finetuning_type == "full" and result.adapter_of is None and result.template == "chatml"
    assert (Path(result.model_path) / "model.safetensors").is_file()
    losses = [p["loss"] for p in result.loss_history]
    assert [p["step"] for p in result.loss_history] == list(range(10, 101, 10))
    assert losses[-1] < losses[0] * 0.5
    _assert_guard_passes(scen, Path(result.model_path), report, ws, root / "guard_full")


def test_broken_config_is_reported(env, runner: LocalRunner) -> None:
    root, _, _ = env
    ws = _workspace(root, "broken", {**BASE, "lr_scheduler_type": "bogus", "not_a_key": 1,
                                     "max_steps": 5, "per_device_train_batch_size": 8})
    report = _validate(env, runner, ws)
    assert not report.passed
    assert report.dropped_keys == ["not_a_key (unknown to LLaMA-Factory)"]
    assert report.failure.error_type is ErrorType.CONFIG
    assert "bogus" in report.failure.message and "SchedulerType" in report.failure.log_tail
    assert report.micro_batch["exit_code"] not in (0, None)


def test_lora_train_and_merge(env, runner: LocalRunner) -> None:
    root, scen, settings = env
    ws = _workspace(root, "lora", {**BASE, "finetuning_type": "lora", "lora_rank": 8, "lora_target": "all",
                                   "per_device_train_batch_size": 16, "max_steps": 40, "logging_steps": 5,
                                   "learning_rate": 2.0e-3})
    report = _validate(env, runner, ws)
    assert report.passed, report.failure
    start = time.monotonic()
    result = LlamaFactoryTrainer(scen, settings, runner=runner).train(CodeResult(workspace=str(ws)), report,
                                                                     None)
    print(f"LoRA 40 steps: {time.monotonic() - start:.1f}s")
    assert model_kind(Path(result.model_path)) == "lora" and result.adapter_of == scen.base_model_path
    losses = [p["loss"] for p in result.loss_history]
    assert len(losses) == 8 and losses[-1] < losses[0]
    start = time.monotonic()
    # the one LoRA merge, used before vLLM serving
    from ftagent.tools.opencompass.run_job import merge_adapter

    # where the evaluation merges an adapter it cannot serve (tools/opencompass/runs.py): the guard checks it too
    merged = merge_adapter(Path(result.model_path), Path(scen.base_model_path),
                           Path(result.model_path) / "oc" / "merged_model", runner, None)
    print(f"merge: {time.monotonic() - start:.1f}s")
    assert (merged / "model.safetensors").is_file() and (merged / "tokenizer.json").is_file()
    assert (Path(result.model_path) / "adapter_model.safetensors").is_file()  # the adapter is kept
    weights = _assert_guard_passes(scen, Path(result.model_path), report, ws, root / "guard_lora")
    assert "the merged model the evaluation served" in weights.detail  # every tensor of it, against its bound


def test_a_grown_vocabulary_passes_the_guard(env, runner: LocalRunner) -> None:
    """Issue 39 (red team false flag): ``add_special_tokens`` grows the embeddings (LLaMA-Factory 0.9.5
    ``resize_embedding_layer``: to a multiple of 64); the validated micro-batch grew them alike, so the guard
    accepts the size and compares the base's rows. A few steps: the point is the files LLaMA-Factory writes."""
    root, scen, settings = env
    ws = _workspace(root, "grown", {**BASE, "finetuning_type": "full", "per_device_train_batch_size": 16,
                                    "max_steps": 5, "logging_steps": 1, "add_special_tokens": "<calc>,</calc>"})
    report = _validate(env, runner, ws)
    assert report.passed, report.failure
    result = LlamaFactoryTrainer(scen, settings, runner=runner).train(CodeResult(workspace=str(ws)), report, None)
    base_vocab = json.loads((Path(scen.base_model_path) / "config.json").read_text())["vocab_size"]
    grown = json.loads((Path(result.model_path) / "config.json").read_text())["vocab_size"]
    print(f"vocabulary {base_vocab} -> {grown}")
    assert grown > base_vocab and grown % 64 == 0
    weights = _assert_guard_passes(scen, Path(result.model_path), report, ws, root / "guard_grown")
    assert "largest movement" in weights.detail


def _assert_guard_passes(scen: ScenarioInfo, model: Path, report, ws: Path, root: Path):
    """Issue 39: what LLaMA-Factory really writes for an honest run (tokenizer, template, decoding files,
    every tensor, each within the movement its optimizer allows) passes the integrity guard's model checks
    against the base and the validated run. Returns the ``weights`` verdict (its detail has the margin)."""
    from tests.helpers.model_files import guard_for

    approved = getattr(report, "approved", None)
    validated = approved.validated_run if approved is not None else Path(report.micro_batch["output_dir"])
    config_path = approved.config_path if approved is not None else Path(report.config_path)
    guard = guard_for(root, Path(scen.base_model_path))
    checks = guard.model_checks(model, [validated], model, start=None, config=yaml.safe_load(config_path.read_text()))
    print(model.name, [(c.name, c.passed, c.detail[:90]) for c in checks])
    weights = next(c for c in checks if c.name == "weights")
    print("weights margin:", weights.detail)
    assert [c for c in checks if c.passed is not True] == [], checks
    return weights


def test_training_failure_raises_classified_step_error(env, runner: LocalRunner) -> None:
    root, scen, settings = env
    ws = _workspace(root, "trainfail", {**BASE, "max_steps": 5})
    report = _validate(env, runner, ws)
    assert report.passed, report.failure
    (ws / "data.json").write_text("[]")  # data vanished between validation and training
    with pytest.raises(StepError) as err:
        LlamaFactoryTrainer(scen, settings, runner=runner).train(CodeResult(workspace=str(ws)), report, None)
    assert err.value.error_type is ErrorType.DATA, err.value.log_tail


def test_run_data_processing(env, runner: LocalRunner) -> None:
    root, _, _ = env
    ws = root / "proc"
    ws.mkdir()
    (ws / "process_data.py").write_text(
        "import json, sys\nn = 5 if '--debug' in sys.argv else 50\n"
        "json.dump([{'instruction': f'q{i}', 'input': '', 'output': f'a{i}'} for i in range(n)],"
        " open('data.json', 'w'))\nprint('wrote', n)\n")
    assert run_data_processing(ws, runner, timeout=120, debug=True).ok
    assert len(json.loads((ws / "data.json").read_text())) == 5
    run_data_processing(ws, runner, timeout=120)
    assert len(json.loads((ws / "data.json").read_text())) == 50
    (ws / "process_data.py").write_text("raise SystemExit('no source data')\n")
    with pytest.raises(StepError) as err:
        run_data_processing(ws, runner, timeout=120)
    assert err.value.error_type is ErrorType.DATA and "no source data" in err.value.log_tail


def test_a_full_disk_stops_the_session_with_what_to_free(env, runner: LocalRunner) -> None:
    """Issue #22.5: a disk that fills during training is an ENV failure that stops the session (not an
    UNKNOWN loop failure repeated every loop). Real: the training's own folder (``train/<workspace>``, issue 39)
    is a 512 KiB tmpfs."""
    import os
    import subprocess

    from ftagent.core.errors import EnvironmentFailure
    from ftagent.tools.llamafactory.train_run import training_run

    root, scen, settings = env
    ws = _workspace(root, "diskfull", {**BASE, "finetuning_type": "full", "per_device_train_batch_size": 32,
                                       "max_steps": 5, "logging_steps": 1})
    report = _validate(env, runner, ws)
    assert report.passed, report.failure
    out = training_run(ws).root  # the trainer empties it, inputs and output are made in it
    out.mkdir(parents=True)
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(out)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root and mount(8) to put the training's folder on a tiny tmpfs")
    try:
        with pytest.raises(EnvironmentFailure) as info:
            LlamaFactoryTrainer(scen, settings, runner=runner).train(CodeResult(workspace=str(ws)), report, None)
    finally:
        subprocess.run(["umount", "-l", str(out)], check=False)
    message = str(info.value)
    assert message.startswith("training stopped: the disk is full") and "GiB free" in message
    assert "eval_cache" in message and "--path" in message  # what to free, and how to go on


def test_a_full_disk_during_validate_stops_the_session(env, runner: LocalRunner, tmp_path: Path) -> None:
    """Issue 34.1: the micro-batch run on a full workspace disk failed UNKNOWN, each code round and loop
    again (20 doomed runs), then ``completed``. Real: the workspace root is a 2 MB tmpfs, the real
    validator and micro-batch, one session through the engine."""
    import os
    import subprocess

    from ftagent.engine.loop import LoopEngine
    from ftagent.engine.session import Session
    from ftagent.finetune.components import Components
    from ftagent.finetune.state import FinetuneSessionState
    from ftagent.finetune.workflow import FinetuneWorkflow
    from tests.unit.test_finetune_workflow import FakeData, FakeEvaluator, FakeTrainer, RecordingFeedback

    _, scen, settings = env
    small = tmp_path / "small"
    small.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(small)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root and mount(8) for a 2 MB workspace")

    class Coder:  # the planner's files, written into the small workspace
        def code(self, hypothesis, trace, workspace, feedback, ctx):
            (workspace / "data.json").write_text(json.dumps(_rows(100)))
            (workspace / "train.yaml").write_text(yaml.safe_dump({**BASE, "finetuning_type": "full",
                                                                   "max_steps": 5}))
            return CodeResult(workspace=str(workspace))

    from ftagent.planners.heuristic.planner import HeuristicProposer

    scenario = scen.model_copy(update={"workspace_root": str(small)})
    validator = LlamaFactoryValidator(scenario, settings, runner=runner)
    components = Components(proposer=HeuristicProposer(scenario), coder=Coder(), validator=validator,
                            trainer=FakeTrainer(), evaluator=FakeEvaluator(), feedback=RecordingFeedback(),
                            data=FakeData())
    workflow = FinetuneWorkflow(scenario, components, coder_max_loop=3, sota_min_delta=0.0, workspace_root=small)
    session = Session.create(tmp_path / "log", state_cls=FinetuneSessionState, scenario=scenario)
    try:
        summary = LoopEngine(workflow, session, loop_n=2).run()
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)
    assert summary.status == "env_error", summary
    assert summary.message.startswith(("validation stopped: the disk is full", "the validate step stopped"))
    assert session.state.steps_done <= 3  # propose, code, validate: no second round, no second loop


def test_a_diverging_micro_batch_fails_validation(env, runner: LocalRunner) -> None:
    """lr 100 turns the tiny model's loss to NaN within the 3 micro-batch steps; transformers' default
    logging filter wrote that NaN as 0.0 and the validator passed it (losses [6.29, 164920, 0.0])."""
    root, _, _ = env
    ws = _workspace(root, "diverge", {**BASE, "finetuning_type": "full", "learning_rate": 100.0,
                                      "per_device_train_batch_size": 8, "max_steps": 300})
    report = _validate(env, runner, ws)
    assert not report.passed and report.failure is not None, report.micro_batch
    assert report.failure.error_type is ErrorType.DIVERGED, report.failure
    assert "diverged at step" in report.failure.message and "learning_rate" in report.failure.suggestion
