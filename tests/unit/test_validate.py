"""The validate step's checks that need no tool env: Alpaca data, YAML, filtering and injection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ftagent.core.errors import ErrorType
from ftagent.core.settings import load_settings
from ftagent.core.types import CodeResult, ScenarioInfo
from ftagent.tools.llamafactory.alpaca import approx_tokens, check_alpaca, describe
from ftagent.tools.llamafactory.catalogue import read_catalogue
from ftagent.tools.llamafactory.validator import ORIGINAL_CONFIG, LlamaFactoryValidator

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llamafactory"
GOOD = {"instruction": "What is 2 + 3?", "input": "", "output": "\\boxed{5}"}


class _NoRunner:
    name = "none"

    def run(self, *args, **kwargs):  # pragma: no cover - only reached when a test is wrong
        raise AssertionError("these checks must fail before the micro-batch run")


def _write(ws: Path, rows, config) -> None:
    ws.mkdir(parents=True, exist_ok=True)
    (ws / "data.json").write_text(rows if isinstance(rows, str) else json.dumps(rows))
    (ws / "train.yaml").write_text(config if isinstance(config, str) else yaml.safe_dump(config))


@pytest.fixture()
def validator(tmp_path: Path) -> LlamaFactoryValidator:
    scen = ScenarioInfo(benchmark="demo", base_model="builtin/tiny-qwen2", base_model_path="/models/tiny",
                        file_path=str(tmp_path), workspace_root=str(tmp_path))
    return LlamaFactoryValidator(scen, load_settings(file_path=str(tmp_path)), runner=_NoRunner(),
                                 catalogue=read_catalogue(FIXTURES))


def test_alpaca_report_counts_bad_rows_with_reasons(tmp_path: Path) -> None:
    rows = [GOOD, {"instruction": "", "output": "x"}, {"instruction": "q"}, "text",
            {"instruction": "q", "input": 3, "output": "a"}, {**GOOD, "input": "context here"}]
    (tmp_path / "d.json").write_text(json.dumps(rows))
    report = check_alpaca(tmp_path / "d.json", cutoff_len=3)
    assert not report.ok and (report.total, report.valid, report.bad, report.with_input) == (6, 2, 4, 1)
    assert [(b.index, b.reason) for b in report.bad_examples] == [
        (1, "'instruction' is empty"), (2, "'output' missing or not a string"), (3, "not an object (str)"),
        (4, "'input' is not a string")]
    assert report.over_cutoff == 2 and report.token_stats["max"] == approx_tokens(
        GOOD["instruction"] + "context here" + GOOD["output"])
    assert "row 1: 'instruction' is empty" in describe(report)
    tolerant = check_alpaca(tmp_path / "d.json", max_bad_fraction=0.7)
    assert tolerant.ok


@pytest.mark.parametrize(("content", "error"), [
    ("{not json", "not valid JSON"), ('{"a": 1}', "must hold a JSON list"), ("[]", "empty list"),
    ('[{"instruction": "", "output": ""}]', "no valid row"),
])
def test_alpaca_file_level_errors(tmp_path: Path, content: str, error: str) -> None:
    (tmp_path / "d.json").write_text(content)
    report = check_alpaca(tmp_path / "d.json")
    assert not report.ok and error in report.error
    assert "was not written" in check_alpaca(tmp_path / "missing.json").error


def test_bad_yaml_and_non_mapping_are_config_errors(validator: LlamaFactoryValidator, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    _write(ws, [GOOD], "learning_rate: [1e-3\nfoo: : :")
    report = validator.validate(CodeResult(workspace=str(ws)), None)
    assert not report.passed and report.failure.error_type is ErrorType.CONFIG
    assert "not valid YAML" in report.failure.message and report.failure.stage == "validate"
    _write(ws, [GOOD], "- a\n- b\n")
    report = validator.validate(CodeResult(workspace=str(ws)), None)
    assert report.failure.error_type is ErrorType.CONFIG and "mapping" in report.failure.message
    (ws / "train.yaml").unlink()
    report = validator.validate(CodeResult(workspace=str(ws)), None)
    assert "not written" in report.failure.message


def test_bad_data_is_a_data_error(validator: LlamaFactoryValidator, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    _write(ws, [GOOD, {"instruction": "q", "output": ""}], {"learning_rate": 1e-3})
    report = validator.validate(CodeResult(workspace=str(ws)), None)
    assert not report.passed and report.failure.error_type is ErrorType.DATA
    assert report.failure.details["bad_examples"] == [{"index": 1, "reason": "'output' is empty"}]
    assert report.data_stats["bad"] == 1


def test_filter_inject_write_back_and_revalidate(validator: LlamaFactoryValidator, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    planner = {"template": "no_such_template", "learning_rate": 1e-3, "made_up": 1, "lora_target": {"x": 1},
               "model_name_or_path": "/planner/pick", "warmup_ratio": 0.1, "max_steps": 50}
    _write(ws, [GOOD] * 3, planner)
    report = validator.validate(CodeResult(workspace=str(ws)), None)
    # the unknown template stops before the micro-batch (the runner would raise)
    assert report.failure.error_type is ErrorType.CONFIG and "no_such_template" in report.failure.message
    assert sorted(report.dropped_keys) == ["lora_target (a mapping is not valid for type str)",
                                           "made_up (unknown to LLaMA-Factory)"]
    final = yaml.safe_load((ws / "train.yaml").read_text())
    # the ratio is kept: the data here is the debug sample, transformers counts the real run's steps
    assert final["model_name_or_path"] == "/models/tiny" and final["warmup_ratio"] == 0.1
    assert "made_up" not in final and "warmup_steps" not in final
    changes = report.changes
    assert "dropped made_up (unknown to LLaMA-Factory)" in changes
    assert "changed model_name_or_path (system-managed)" in changes
    bookkeeping = next(c for c in changes if c.startswith("set by the system"))
    assert "output_dir" in bookkeeping and "report_to" in bookkeeping and "dataset_dir" in bookkeeping
    assert "set bf16: false (system-managed)" in changes  # a CPU setting the planner should know about
    assert not any("warmup" in c or "learning_rate" in c for c in changes)
    assert final["output_dir"] == str(ws.absolute().parent / "train" / ws.name / "run" / "output")
    assert final["dataset"] == "ftagent_data"
    assert yaml.safe_load((ws / ORIGINAL_CONFIG).read_text()) == planner
    # the data's registration is written only where a run reads it: the micro-batch's inputs, the sealed data folder
    assert not (ws / "dataset_info.json").exists()
    # validating the same workspace again starts from the original (dropped keys still reported)
    again = validator.validate(CodeResult(workspace=str(ws)), None)
    assert again.dropped_keys == report.dropped_keys
    assert yaml.safe_load((ws / ORIGINAL_CONFIG).read_text()) == planner
    # a new train.yaml from the coder replaces the original
    _write(ws, [GOOD] * 3, {**planner, "made_up": 2, "template": "bogus2"})
    third = validator.validate(CodeResult(workspace=str(ws)), None)
    assert "bogus2" in third.failure.message
    assert yaml.safe_load((ws / ORIGINAL_CONFIG).read_text())["made_up"] == 2


def test_an_alias_bomb_in_train_yaml_is_a_config_error_found_quickly(validator: LlamaFactoryValidator,
                                                                     tmp_path: Path) -> None:
    """Issue 34.10: the LLM's train.yaml goes through the bounded loader (ftagent.core.yamlio) too."""
    import time

    bomb = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    bomb += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 12)]
    ws = tmp_path / "ws"
    _write(ws, [GOOD], "\n".join(bomb))
    started = time.monotonic()
    report = validator.validate(CodeResult(workspace=str(ws)), None)
    assert time.monotonic() - started < 10
    assert report.failure.error_type is ErrorType.CONFIG and "aliases" in report.failure.message
