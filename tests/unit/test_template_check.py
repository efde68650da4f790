"""The validator checks a planner-chosen ``template:`` against the format evaluation prompts with.

The probe outputs under tests/fixtures/llamafactory/template_probe/ were written by the real probe
(``template_probe_script.py`` with LLaMA-Factory 0.9.5 in the tool env) for ``builtin/tiny-qwen2``
(a ChatML chat template); tests/integration/test_template_check.py runs it for real.
"""

import json
import shutil
from pathlib import Path

import pytest
import yaml

from ftagent.core.errors import ErrorType
from ftagent.core.settings import load_settings
from ftagent.core.types import CodeResult, ScenarioInfo
from ftagent.runners.base import RunResult
from ftagent.tools.llamafactory.catalogue import read_catalogue
from ftagent.tools.llamafactory.template_check import TemplateProbe, template_mismatch
from ftagent.tools.llamafactory.validator import LlamaFactoryValidator

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llamafactory"
PROBES = FIXTURES / "template_probe"
ROW = {"instruction": "What is 2 + 3?", "input": "", "output": "\\boxed{5}"}


def _probe(name: str, model: str = "tiny_qwen2") -> TemplateProbe:
    return TemplateProbe.model_validate_json((PROBES / f"{model}_{name}.json").read_text(encoding="utf-8"))


class _Runner:
    """Answers the probe with a recorded real output; a micro-batch run logs one finite loss."""

    name = "fake"

    def __init__(self, probe_ok: bool = True) -> None:
        self.probe_ok, self.probes, self.trains = probe_ok, 0, 0

    def run(self, cmd, *, tool, workdir, env=None, mounts=None, gpus=None, timeout=None, log_file=None, **_):
        if cmd[0] == "python":  # the probe: python SCRIPT MODEL OUT TEMPLATE DATA_ARGS
            self.probes += 1
            if not self.probe_ok:
                return RunResult(exit_code=1, duration_s=0.1, log_tail="ImportError: no llamafactory")
            shutil.copy(PROBES / f"tiny_qwen2_{cmd[4]}.json", cmd[3])
            return RunResult(exit_code=0, duration_s=0.1)
        self.trains += 1
        out = Path(yaml.safe_load(Path(cmd[-1]).read_text())["output_dir"])
        out.mkdir(parents=True, exist_ok=True)
        (out / "trainer_log.jsonl").write_text(json.dumps({"current_steps": 1, "loss": 1.5}) + "\n")
        return RunResult(exit_code=0, duration_s=0.1)


def _validate(tmp_path: Path, runner: _Runner, template: str, validator: LlamaFactoryValidator | None = None):
    ws = tmp_path / f"ws_{template}_{runner.probes}_{runner.trains}"
    ws.mkdir()
    (ws / "data.json").write_text(json.dumps([ROW] * 4))
    (ws / "train.yaml").write_text(yaml.safe_dump({"stage": "sft", "do_train": True, "finetuning_type": "lora",
                                                   "template": template}))
    scen = ScenarioInfo(benchmark="demo_add", base_model="builtin/tiny-qwen2", base_model_path=str(tmp_path / "m"),
                        file_path=str(tmp_path), workspace_root=str(tmp_path))
    validator = validator or LlamaFactoryValidator(scen, load_settings(file_path=str(tmp_path)), runner,
                                                   catalogue=read_catalogue(FIXTURES))
    return validator.validate(CodeResult(workspace=str(ws)), None), validator


def test_recorded_probes():
    qwen, llama3 = _probe("qwen"), _probe("llama3")
    assert not qwen.replaces_chat_template and not qwen.agrees  # Qwen's default system turn in training only
    assert "You are Qwen" in qwen.training_prompt and "system" not in qwen.evaluation_prompt
    assert not llama3.agrees and llama3.answer_end(llama3.training_answer) == "<|eot_id|>"
    assert _probe("chatml").agrees
    alpaca = _probe("alpaca")  # LLaMA-Factory writes alpaca's format into the saved tokenizer: they agree
    assert alpaca.replaces_chat_template and alpaca.agrees and "### Instruction:" in alpaca.evaluation_prompt


def test_thinking_family_template_agrees():
    """qwen3 trains an empty think block before the answer, as a Qwen3-style chat template renders it."""
    probe = _probe("qwen3", model="tiny_thinking")
    assert probe.training_answer.startswith("<think>") and probe.agrees and template_mismatch(probe) is None


def test_mismatch_is_one_structured_failure():
    found = template_mismatch(_probe("qwen"))
    assert found is not None and "template 'qwen'" in found["message"]
    assert found["suggestion"].startswith("Remove `template:`") and "chatml" in found["suggestion"]
    details = found["details"]
    assert details["template"] == "qwen" and "chatml" in details["matching_templates"]
    assert details["training_prompt"] != details["evaluation_prompt"]
    assert template_mismatch(_probe("chatml")) is None and template_mismatch(_probe("alpaca")) is None


@pytest.mark.parametrize("template", ["qwen", "llama3"])
def test_validator_rejects_a_template_evaluation_does_not_use(tmp_path, template):
    runner = _Runner()
    report, _ = _validate(tmp_path, runner, template)
    assert not report.passed and report.failure.error_type is ErrorType.CONFIG
    assert f"template '{template}'" in report.failure.message and "chatml" in report.failure.details["matching_templates"]
    assert runner.trains == 0  # failed before the micro-batch run


def test_validator_passes_an_agreeing_template_and_probes_once(tmp_path):
    runner = _Runner()
    report, validator = _validate(tmp_path, runner, "chatml")
    assert report.passed and runner.trains == 1
    assert report.micro_batch["template_check"] == {"template": "chatml", "agrees": True}
    _validate(tmp_path, runner, "chatml", validator)
    assert runner.probes == 1  # the same template on the same model is probed once per validator


def test_probe_that_cannot_run_leaves_it_to_the_micro_batch(tmp_path):
    runner = _Runner(probe_ok=False)
    report, _ = _validate(tmp_path, runner, "qwen")
    assert report.passed and runner.trains == 1
    assert any("template check could not run" in n for n in report.micro_batch["notes"])
