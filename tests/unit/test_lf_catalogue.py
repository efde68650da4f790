"""The parameter catalogue: reading the cache, prompt formatting, staleness."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ftagent.tools.llamafactory.catalogue import load_or_build_catalogue, read_catalogue
from ftagent.tools.llamafactory.config import managed_keys

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llamafactory"
MANAGED = [str(k) for k in managed_keys(gpu=False)]
MANAGED_GPU = [str(k) for k in managed_keys(gpu=True)]


class _NoRunner:
    name = "none"

    def run(self, *args, **kwargs):  # pragma: no cover - called only when a test fails
        raise AssertionError("the cached catalogue must be used without running anything")


def test_read_catalogue_holds_all_sections() -> None:
    cat = read_catalogue(FIXTURES)
    assert cat.version == "0.9.5"
    assert {"full", "lora"} <= set(cat.methods) and "chatml" in cat.templates
    sections = {p.section for p in cat.parameters.values()}
    assert sections == {"model", "data", "finetuning", "training", "generating"}
    for name in ("model_name_or_path", "cutoff_len", "lora_rank", "learning_rate", "max_new_tokens"):
        assert cat.knows(name)
    assert cat.parameters["lora_rank"].group == "LoraArguments"
    assert cat.parameters["deepspeed"].accepts_mapping and not cat.parameters["cutoff_len"].accepts_mapping


def _names(text: str) -> list[str]:
    return [line[2:].split(" ", 1)[0] for line in text.splitlines() if line.startswith("- ")]


def test_format_for_prompt_excludes_noise_and_is_bounded() -> None:
    cat = read_catalogue(FIXTURES)
    text = cat.format_for_prompt(gpu=False, managed=MANAGED)
    names = set(_names(text))
    assert {"learning_rate", "lora_rank", "cutoff_len", "num_train_epochs", "finetuning_type",
            "per_device_train_batch_size", "gradient_accumulation_steps", "packing", "warmup_ratio"} <= names
    assert not {n for n in names if n.startswith(("push_to_hub", "hub_", "deepspeed", "vllm_"))}
    assert "output_dir" not in names and "model_name_or_path" not in names  # system-managed
    assert "stage" not in names and "do_train" not in names
    assert len(text) <= 14000 and "truncated" not in text
    # the managed keys always head it (issue 39: the refused path keys are named there too)
    small = cat.format_for_prompt(["LoraArguments"], managed=MANAGED, max_chars=2200)
    assert "lora_rank" in small and "learning_rate" not in small and len(small) <= 2200


def test_essential_arguments_survive_any_budget_and_nothing_is_cut_mid_line() -> None:
    cat = read_catalogue(FIXTURES)
    full = cat.format_for_prompt(gpu=True, managed=MANAGED_GPU)
    tight = cat.format_for_prompt(gpu=True, managed=MANAGED_GPU, max_tokens=1900)  # issue 40: + preference keys
    assert "deepspeed" not in _names(full)  # the validator sets it from the memory plan
    essential = ["finetuning_type", "lora_rank", "learning_rate", "cutoff_len", "per_device_train_batch_size",
                 "num_train_epochs", "bf16", "eval_strategy", "save_strategy", "packing", "warmup_ratio"]
    assert set(essential) <= set(_names(tight))
    assert "more valid arguments not listed for space" in tight and len(tight) < len(full)
    full_lines = set(full.splitlines())
    kept = [line for line in tight.splitlines() if line.startswith("- ")]
    assert all(line in full_lines for line in kept)  # whole lines only
    # grouped: the essential topics come first, the others by section
    assert tight.index("### Learning rate and schedule") < tight.index("## Other finetuning arguments")


def test_cached_catalogue_is_used_and_mismatched_files_are_rejected(tmp_path: Path) -> None:
    for name in ("constants.json", "parameters.json", "grpo_parameters.json"):
        shutil.copy(FIXTURES / name, tmp_path / name)
    cat = load_or_build_catalogue(tmp_path, _NoRunner(), check_version=False)
    assert cat.knows("learning_rate")
    params = json.loads((tmp_path / "parameters.json").read_text())
    params["llamafactory_version"] = "0.0.1"
    (tmp_path / "parameters.json").write_text(json.dumps(params))
    with pytest.raises(ValueError, match="different LLaMA-Factory versions"):
        read_catalogue(tmp_path)
