"""Issue 40: training stages as data, FT_STAGES, the stage's keys, formats and GRPO config (no tool env)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ftagent.core.errors import UserInputError
from ftagent.core.hardware import GPUInfo, HardwareInfo
from ftagent.core.settings import load_settings
from ftagent.core.stage_specs import STAGE_NAMES, parse_stages, stage_spec, stage_specs, weights_chain
from ftagent.core.trace import Experiment, Trace
from ftagent.core.types import Hypothesis
from ftagent.tools.llamafactory.catalogue import read_catalogue
from ftagent.tools.llamafactory.config import manage_config, write_dataset_info
from ftagent.tools.llamafactory.preference import check_data
from ftagent.tools.llamafactory.stage_config import filter_stage_keys, stage_forced
from ftagent.tools.trl.config import (
    filter_grpo_config,
    group_problem,
    manage_grpo_config,
    micro_grpo_config,
    vllm_preflight,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llamafactory"
CPU = HardwareInfo()


def _gpus(n: int) -> HardwareInfo:
    return HardwareInfo(gpus=[GPUInfo(index=i, name="NVIDIA H100 80GB HBM3", memory_total_gb=79.6, memory_used_gb=0.0,
                                      compute_capability=(9, 0)) for i in range(n)])


def test_stage_facts_are_data_and_every_stage_is_known() -> None:
    specs = stage_specs()
    assert tuple(specs) == STAGE_NAMES
    assert specs["orpo"].lf_stage == "dpo" and specs["orpo"].pref_loss == "orpo"
    assert specs["grpo"].trainer == "trl" and specs["grpo"].data == "alpaca"
    assert specs["kto"].data == "kto" and specs["dpo"].data == "pairwise" and specs["dpo"].needs_samples


def test_ft_stages_is_validated_with_a_did_you_mean(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().ft.stages == ["sft", "dpo", "grpo"]
    monkeypatch.setenv("FT_STAGES", " DPO , grpo,dpo")
    assert load_settings().ft.stages == ["dpo", "grpo"]
    monkeypatch.setenv("FT_STAGES", "sft,dop")
    with pytest.raises(UserInputError, match="FT_STAGES.*Did you mean 'dpo'"):
        load_settings()
    with pytest.raises(ValueError, match="no training stage"):
        parse_stages(" , ")


def test_ft_stages_typo_exits_2_on_the_cli(tmp_path: Path) -> None:
    env = {"FT_STAGES": "sft,grpoo", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    main = "import sys; sys.argv[0] = 'ftagent'; from ftagent.cli.main import main; main()"
    out = subprocess.run([sys.executable, "-c", main, "plan", "--benchmark", "demo_add",
                          "--base-model", "builtin/tiny-qwen2"], cwd=tmp_path, env={**env, "PYTHONPATH": str(
                              Path(__file__).resolve().parents[2])}, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "grpoo" in out.stderr + out.stdout and "Did you mean 'grpo'" in out.stderr + out.stdout
    assert not (tmp_path / "log").exists()


def test_hypothesis_stage_is_checked_and_chains_follow_weights_from() -> None:
    with pytest.raises(ValueError, match="Did you mean 'simpo'"):
        Hypothesis(hypothesis="h", stage="simpoo")
    trace = Trace(experiments=[
        Experiment(loop=0, hypothesis=Hypothesis(hypothesis="a")),
        Experiment(loop=1, hypothesis=Hypothesis(hypothesis="b", stage="dpo", weights_from=0)),
        Experiment(loop=2, hypothesis=Hypothesis(hypothesis="c", stage="grpo", weights_from=1))])
    assert weights_chain(trace, 2) == ["sft", "dpo", "grpo"] and weights_chain(trace, None) == []


def test_each_stage_keeps_only_the_rlhf_keys_its_trainer_reads() -> None:
    cat = read_catalogue(FIXTURES)
    planner = {"learning_rate": 1e-4, "pref_beta": 0.2, "pref_loss": "sigmoid", "simpo_gamma": 0.7,
               "kto_chosen_weight": 2.0, "ref_model": "/elsewhere", "stage": "sft"}
    kept, dropped = filter_stage_keys(planner, stage_spec("dpo"), cat)
    assert kept == {"learning_rate": 1e-4, "pref_beta": 0.2, "pref_loss": "sigmoid"}
    why = {d.key: d.reason for d in dropped}
    assert "only by simpo" in why["simpo_gamma"] and "only by kto" in why["kto_chosen_weight"]
    assert "reference is the start model" in why["ref_model"] and "dpo" in why["stage"]
    kept, dropped = filter_stage_keys(planner, stage_spec("sft"), cat)
    assert kept == {"learning_rate": 1e-4}  # an SFT run drops every preference key, with the reason
    kept, dropped = filter_stage_keys({"pref_loss": "sigmoid", "simpo_gamma": 0.5}, stage_spec("simpo"), cat)
    assert kept == {"simpo_gamma": 0.5} and "pref_loss simpo" in dropped[0].reason
    assert filter_stage_keys({"pref_loss": "orpo"}, stage_spec("dpo"), cat)[0] == {}  # orpo is its own stage


def test_the_stage_and_start_weights_are_forced_into_the_config(tmp_path: Path) -> None:
    managed = manage_config({"stage": "sft", "learning_rate": 1e-4}, workspace=tmp_path,
                            base_model_path="/ws/weights/loop_1", hardware=CPU, n_samples=10,
                            stage_keys=stage_forced(stage_spec("orpo")))
    assert managed.config["stage"] == "dpo" and managed.config["pref_loss"] == "orpo"
    assert managed.config["model_name_or_path"] == "/ws/weights/loop_1"
    assert manage_config({}, workspace=tmp_path, base_model_path="/m", hardware=CPU, n_samples=1).config["stage"] == "sft"


def test_dataset_info_registers_each_format_as_llamafactory_reads_it(tmp_path: Path) -> None:
    pair = json.loads(write_dataset_info(tmp_path, "d", data_format="pairwise").read_text())["d"]
    assert pair["ranking"] is True and pair["columns"] == {"prompt": "instruction", "query": "input",
                                                           "chosen": "chosen", "rejected": "rejected"}
    kto = json.loads(write_dataset_info(tmp_path, "d", data_format="kto").read_text())["d"]
    assert "ranking" not in kto and kto["columns"]["kto_tag"] == "kto_tag" and kto["columns"]["response"] == "output"


def _write(tmp_path: Path, rows: list) -> Path:
    path = tmp_path / "data.json"
    path.write_text(json.dumps(rows))
    return path


def test_preference_rows_are_checked_like_alpaca(tmp_path: Path) -> None:
    good = [{"instruction": "q", "input": "", "chosen": "\\boxed{2}", "rejected": "\\boxed{3}"}]
    assert check_data(_write(tmp_path, good), "pairwise").ok
    bad = good + [{"instruction": "q", "chosen": "a", "rejected": "a"}, {"instruction": "q", "chosen": 3, "rejected": "b"}]
    report = check_data(_write(tmp_path, bad), "pairwise")
    assert not report.ok and [b.reason for b in report.bad_examples] == [
        "'chosen' and 'rejected' are the same answer", "'chosen' missing or not a string"]
    kto = [{"instruction": "q", "output": "a", "kto_tag": True}, {"instruction": "q", "output": "b", "kto_tag": "false"}]
    report = check_data(_write(tmp_path, kto), "kto")
    assert not report.ok and "JSON boolean" in report.bad_examples[0].reason  # a string would train as SFT
    one_kind = [{"instruction": "q", "output": "a", "kto_tag": True}]
    assert "desirable and undesirable" in (check_data(_write(tmp_path, one_kind), "kto").error or "")
    assert check_data(_write(tmp_path, [{"instruction": "q", "output": "a"}]), "alpaca").ok


def test_grpo_keys_are_checked_against_trls_own_grpo_config() -> None:
    cat = read_catalogue(FIXTURES)
    assert cat.trl_version and "num_generations" in cat.grpo_parameters
    planner = {"stage": "grpo", "finetuning_type": "lora", "lora_rank": 8, "num_generations": 4, "beta": 0.04,
               "learning_rate": 1e-5, "pref_beta": 0.1, "lora_target": ["q_proj", "v_proj"], "bogus": 1}
    kept, dropped = filter_grpo_config(planner, cat)
    assert kept["lora_target"] == "q_proj,v_proj" and kept["num_generations"] == 4 and "beta" in kept
    assert {d.key for d in dropped} == {"pref_beta", "bogus"}
    assert filter_grpo_config({"finetuning_type": "freeze"}, cat)[1][0].key == "finetuning_type"


def test_grpo_on_cpu_generates_with_transformers_and_on_gpus_plans_vllm(tmp_path: Path) -> None:
    cpu = manage_grpo_config({"use_vllm": True}, workspace=tmp_path, start_path="/m", hardware=CPU).config
    assert cpu["use_vllm"] is False and cpu["use_cpu"] is True and cpu["finetuning_type"] == "lora"
    assert cpu["model_name_or_path"] == "/m" and cpu["output_dir"] == str(
        tmp_path.parent / "train" / tmp_path.name / "run" / "output")
    gpu = manage_grpo_config({}, workspace=tmp_path, start_path="/m", hardware=_gpus(2), vllm_version="0.10.2")
    assert gpu.config["use_vllm"] is True and gpu.config["vllm_mode"] == "colocate" and gpu.config["bf16"] is True
    assert gpu.config["vllm_gpu_memory_utilization"] == 0.3
    none = manage_grpo_config({}, workspace=tmp_path, start_path="/m", hardware=_gpus(1), vllm_version=None)
    assert none.config["use_vllm"] is False and "no vLLM" in none.notes[0]


def test_vllm_preflight_names_trls_refusals() -> None:
    assert vllm_preflight({"use_vllm": False}, gpu_count=0, vllm_version=None) == []
    assert vllm_preflight({"use_vllm": True}, gpu_count=8, vllm_version="0.10.2") == []
    problems = vllm_preflight({"use_vllm": True, "vllm_tensor_parallel_size": 3}, gpu_count=8, vllm_version="0.11.0")
    assert any("supports vLLM 0.10.2 only" in p for p in problems) and any("must divide the 8 GPUs" in p for p in problems)
    assert "needs a GPU" in vllm_preflight({"use_vllm": True}, gpu_count=0, vllm_version="0.10.2")[0]


def test_grpo_groups_must_fill_the_generation_batch(tmp_path: Path) -> None:
    assert group_problem({"num_generations": 4, "per_device_train_batch_size": 8}) is None
    assert "divisible by num_generations (4)" in group_problem({"num_generations": 4, "per_device_train_batch_size": 6})
    assert "at least 2" in group_problem({"num_generations": 1})
    micro = micro_grpo_config({"num_generations": 4, "per_device_train_batch_size": 6, "max_steps": 500}, tmp_path)
    assert micro["max_steps"] == 2 and group_problem(micro) is None and micro["output_dir"].startswith(str(tmp_path))


def test_heuristic_stage_data_scripts_write_valid_rows_from_samples(tmp_path: Path) -> None:
    from ftagent.planners.heuristic.stage_code import render_stage_data_script

    samples = [{"prompt": "What is 1 + 1?", "gold": "\\boxed{2}", "sample": s, "score": sc}
               for s, sc in (("\\boxed{2}", 1.0), ("\\boxed{3}", 0.0), ("\\boxed{3}", 0.0), ("junk", 0.0))]
    samples += [{"prompt": "What is 2 + 2?", "gold": "\\boxed{4}", "sample": "\\boxed{5}", "score": 0.0}]
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    expect = {"dpo": 3, "kto": 5, "grpo": 2}
    for stage, n in expect.items():
        (tmp_path / "process_data.py").write_text(render_stage_data_script(stage))
        subprocess.run([sys.executable, "process_data.py"], cwd=tmp_path, check=True, capture_output=True)
        rows = json.loads((tmp_path / "data.json").read_text())
        assert len(rows) == n and check_data(tmp_path / "data.json", stage_spec(stage).data).ok, (stage, rows)
    pairs = [{"instruction": "What is 2 + 2?", "input": "", "chosen": "\\boxed{4}", "rejected": "\\boxed{5}"}]
    (tmp_path / "process_data.py").write_text(render_stage_data_script("dpo"))
    subprocess.run([sys.executable, "process_data.py"], cwd=tmp_path, check=True, capture_output=True)
    assert pairs[0] in json.loads((tmp_path / "data.json").read_text())  # no right sample: the gold is chosen


def test_stage_yaml_names_the_stage_and_no_lf_keys_for_grpo() -> None:
    from ftagent.planners.heuristic.stage_code import render_stage_yaml

    dpo = yaml.safe_load(render_stage_yaml("simpo", {"learning_rate": 1e-4, "x": None}, "chatml"))
    assert dpo["stage"] == "dpo" and dpo["template"] == "chatml" and "x" not in dpo
    grpo = yaml.safe_load(render_stage_yaml("grpo", {"num_generations": 4}, "chatml"))
    assert grpo["stage"] == "grpo" and "do_train" not in grpo


def test_a_stage_outside_ft_stages_or_a_start_without_weights_fails_the_loop_with_config(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from ftagent.core.errors import ErrorType, StepError
    from ftagent.finetune.stage_prepare import StagePreparer, link_model_files

    scenario = SimpleNamespace(base_model_path=str(tmp_path / "base"))
    prep = StagePreparer(scenario, SimpleNamespace(ft=SimpleNamespace(stages=["sft", "dpo"])), runner=None,  # type: ignore[arg-type]
                         run=None, data=None)  # type: ignore[arg-type]
    with pytest.raises(StepError, match="stage grpo is not enabled .FT_STAGES=sft,dpo.") as err:
        prep.stage_of(Hypothesis(hypothesis="h", stage="grpo"))
    assert err.value.error_type is ErrorType.CONFIG
    failed = Trace(experiments=[Experiment(loop=0, hypothesis=Hypothesis(hypothesis="a"))])  # no score, no model
    with pytest.raises(StepError, match="loop 0 has no trained model to start from"):
        prep.start_model(Hypothesis(hypothesis="h", stage="dpo", weights_from=0), failed, tmp_path, ctx=None)  # type: ignore[arg-type]
    assert prep.start_model(Hypothesis(hypothesis="h"), failed, tmp_path, ctx=None).path == str(tmp_path / "base")  # type: ignore[arg-type]
    model = tmp_path / "loop_0" / "output"
    (model / "oc" / "eval").mkdir(parents=True)  # the parent's evaluation records: never part of its start weights
    for name, text in (("config.json", "{}"), ("model.safetensors", "w"), ("trainer_state.json", "{}")):
        (model / name).write_text(text)
    (model / "oc" / "eval" / "predictions.json").write_text("{}")
    (model / "link.json").symlink_to(tmp_path / "base")
    scored = Trace(experiments=[Experiment(loop=0, hypothesis=Hypothesis(hypothesis="a"), val_score=40.0,
                                           artefacts={"model": str(model)})])
    start = prep.start_model(Hypothesis(hypothesis="h", stage="dpo", weights_from=0), scored, tmp_path, ctx=None)  # type: ignore[arg-type]
    assert start.path == str(tmp_path / "weights" / "loop_0") and start.chain == ["sft"] and start.loop == 0
    assert sorted(p.name for p in Path(start.path).iterdir()) == ["config.json", "model.safetensors"]
    assert not (tmp_path / "weights" / "loop_0.partial").exists()
    link_model_files(model, tmp_path / "again")  # idempotent by construction: a fresh folder each time
