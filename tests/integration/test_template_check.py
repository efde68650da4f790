"""The template check with the real LLaMA-Factory 0.9.5 and the tiny model (a ChatML chat template).

``template: qwen`` (no ``replace_jinja_template``) trains Qwen's default system turn while the
trained model keeps the ChatML template evaluation prompts with: the validator stops before the
micro-batch with a CONFIG failure naming templates that match. ``chatml`` agrees.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ftagent.core.errors import ErrorType
from ftagent.core.settings import load_settings
from ftagent.core.types import CodeResult, ScenarioInfo
from ftagent.runners.local import LocalRunner
from ftagent.tools.llamafactory.catalogue import read_catalogue
from ftagent.tools.llamafactory.template_check import probe_template
from ftagent.tools.llamafactory.validator import LlamaFactoryValidator

pytestmark = pytest.mark.integration
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llamafactory"


def test_wrong_template_is_a_config_failure(tools_env, tiny_model, tmp_path):
    runner = LocalRunner(tools_env, sandbox="none")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "data.json").write_text(json.dumps([{"instruction": "What is 2 + 3?", "output": "\\boxed{5}"}] * 4))
    (ws / "train.yaml").write_text(yaml.safe_dump({"stage": "sft", "do_train": True, "finetuning_type": "lora",
                                                   "template": "qwen"}))
    scen = ScenarioInfo(benchmark="demo_add", base_model="builtin/tiny-qwen2", base_model_path=str(tiny_model),
                        file_path=str(tmp_path), workspace_root=str(tmp_path))
    validator = LlamaFactoryValidator(scen, load_settings(file_path=str(tmp_path)), runner,
                                      catalogue=read_catalogue(FIXTURES))
    report = validator.validate(CodeResult(workspace=str(ws)), None)
    assert not report.passed and report.failure.error_type is ErrorType.CONFIG
    assert "template 'qwen'" in report.failure.message
    details = report.failure.details
    assert "You are Qwen" in details["training_prompt"] and "<|im_start|>system" not in details["evaluation_prompt"]
    assert "chatml" in details["matching_templates"]
    assert not (ws / "debug").exists()  # no micro-batch run

    good = probe_template(tiny_model, {"template": "chatml"}, runner, tmp_path, timeout=600)
    assert good.agrees and good.training_prompt == "<|im_start|>user\nWhat is 12 + 30?<|im_end|>\n<|im_start|>assistant\n"
