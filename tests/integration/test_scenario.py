"""Scenario initialisation on demo_add + builtin/tiny-qwen2, end to end and offline (DESIGN §4)."""

from __future__ import annotations

import time

import pytest

from ftagent.core.settings import load_settings
from ftagent.engine.events import ScenarioStage
from ftagent.finetune.resolve import resolve_run
from ftagent.finetune.scenario import FinetuneScenario
from ftagent.runners.local import LocalRunner

pytestmark = pytest.mark.integration
STAGES = ["model", "datasets", "benchmark_data", "llama_factory_catalogue", "dataset_catalogue", "hardware",
          "memory"]


def test_scenario_builds_offline_in_order_and_caches(tools_env, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = load_settings(target_benchmark="demo_add", base_model="builtin/tiny-qwen2",
                             file_path=tmp_path / "ft", user_target_scenario="be precise")
    run = resolve_run(settings)  # the start-up's resolved facts (settings.ft stays as given)
    runner = LocalRunner(tools_env)
    events: list[ScenarioStage] = []
    start = time.monotonic()
    builder = FinetuneScenario(settings, runner, events.append, run=run)
    info = builder.build(builder.prepare())
    first = time.monotonic() - start
    done = [e.stage for e in events if e.status == "done"]
    assert done == STAGES  # DESIGN §4 order, one event per stage
    assert info.datasets == ["demo_add"]  # only the benchmark's datasets are prepared
    assert not (tmp_path / "ft" / "datasets" / "deepscaler").exists()
    assert info.model_info.num_parameters == 558_208 and info.model_info.template == "chatml"
    assert info.user_target_scenario == "be precise" and info.core_metric == "accuracy"
    assert "| full" in info.memory_report and info.hardware.gpus == []
    assert (tmp_path / "ft" / ".llama_factory_info" / "parameters.json").is_file()
    assert (tmp_path / "ft" / "datasets" / "dataset_info.json").is_file()
    events.clear()
    start = time.monotonic()
    builder = FinetuneScenario(settings, runner, events.append, run=run)
    again = builder.build(builder.prepare())
    second = time.monotonic() - start
    assert again.base_model_path == info.base_model_path
    print(f"scenario init: first {first:.1f}s, cached {second:.1f}s")
    assert second < first  # model, datasets and catalogues are reused
