"""One start-up (issue #22 item 4): a session looks its benchmark up in the registry at most 3 times
before loop 0, not once more per evaluation, and reads models.yaml once.

The session's path without training: :func:`resolve_run`, the scenario builder's dataset selection,
benchmark data, decoding facts and brief, the baseline (both splits), the six components, then one
loop's evaluation (OpenCompass config rendered and parsed; :class:`FakeOpenCompass` writes what
OpenCompass writes) and the data step's contamination scan. The counting wrappers are the ones of
``tests/bench/startup_lookups.py`` (which measures the same on a real one-loop demo).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from ftagent.core.settings import load_settings
from ftagent.core.trace import Trace
from ftagent.core.types import ScenarioInfo, TrainResult
from tests.bench.startup_lookups import counting
from tests.helpers.weights import safetensors_bytes
from tests.unit.test_oc_splits import FakeOpenCompass

MAX_LOOKUPS_BEFORE_LOOP0 = 3


@pytest.fixture()
def model(tmp_path) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(safetensors_bytes(b"weights"))
    (folder / "chat_template.jinja").write_text("{{ messages }}")
    return folder


def _session_without_training(tmp_path: Path, model: Path, counter) -> None:
    from ftagent.benchmarks.prepared import prepare_benchmark
    from ftagent.finetune.components import build_components
    from ftagent.finetune.resolve import resolve_run
    from ftagent.finetune.scenario import FinetuneScenario
    from ftagent.tools.opencompass.inference import eval_decoding

    settings = load_settings(target_benchmark="demo_add", base_model="builtin/tiny-qwen2", planner="heuristic",
                             file_path=tmp_path / "ft", workspace_path=tmp_path / "ws", benchmark_limit=4)
    runner = FakeOpenCompass()
    # -- before loop 0: what app.run_finetune and FinetuneScenario.prepare/build/baseline do
    run = resolve_run(settings)
    builder = FinetuneScenario(settings, runner, lambda event: None, run=run)
    selection = builder._select_datasets()
    prepare_benchmark(run.adapter, run.benchmarks_root, settings.ft.benchmark_limit)
    spec = run.spec
    info = ScenarioInfo(benchmark=run.benchmark, base_model=run.base_model, base_model_path=str(model),
                        file_path=str(tmp_path / "ft"), workspace_root=str(tmp_path / "ws"),
                        datasets=selection.datasets, core_metric=spec.core_metric, direction=spec.direction,
                        eval_decoding=eval_decoding(run.base_model, 0, spec.max_out_len,
                                                    inference=run.model.inference))
    from ftagent.finetune.scenario import render_brief

    info.description_text = render_brief(info, run)
    builder.baseline(info, Trace(), lambda seconds: seconds)
    components = build_components(info, settings, runner, "heuristic", run=run)
    # -- loop 0: one evaluation and the data step's scan
    counter.phase = "loop"
    ctx = SimpleNamespace(limit=lambda seconds: seconds, emit=lambda event: None)
    out = components.evaluator.evaluate_splits(TrainResult(output_dir=str(tmp_path / "out"), model_path=str(model),
                                                           template="chatml"), ctx)
    assert out.results["validation"].score == 50.0  # the evaluation really ran (fake OpenCompass)
    components.data._scan([{"instruction": "What is 2 + 2?", "input": "", "output": "4"}])
    assert len(runner.runs) == 2  # the baseline and the loop's evaluation


def test_one_registry_lookup_and_one_models_yaml_read_per_session(tmp_path, model):
    with counting() as counter:
        _session_without_training(tmp_path, model, counter)
    summary = counter.summary()
    callers = summary["callers"]
    assert summary["evaluations"] == {"baseline": 1, "loop": 1}
    assert summary["registry_lookups_before_loop0"] <= MAX_LOOKUPS_BEFORE_LOOP0, callers["registry"]
    assert summary["registry_lookups_in_baseline_evaluation"] == 0, callers["registry"]
    assert summary["registry_lookups_in_loops"] == 0, callers["registry"]
    assert summary["models_yaml_reads"] == 1, callers["models_yaml"]
    assert summary["models_yaml_reads_in_evaluations"] == 0, callers["models_yaml"]


def test_the_counter_sees_a_lookup_outside_the_resolution(tmp_path):
    """The wrappers count what they should (a test that cannot fail proves nothing)."""
    from ftagent.benchmarks import get_benchmark
    from ftagent.tools.opencompass.inference import inference_config

    with counting() as counter:
        get_benchmark("demo_add")
        inference_config("builtin/tiny-qwen2", 0)
    assert counter.count("registry") == 1 and counter.count("models_yaml") == 1


def test_job_resolves_every_task_as_llm_finetune_does_before_any_starts(tmp_path, monkeypatch):
    """``ftagent job run``: a task whose base model llm_finetune would reject stops the job (exit 2,
    nothing planned); a good one's plan carries the description start-up resolved."""
    import json

    from typer.testing import CliRunner

    from ftagent.cli.main import app

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FT_FILE_PATH", str(tmp_path / "ft"))
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps({"tasks": [{"model": "builtin/tiny-qwen2", "benchmark": "demo_add"},
                                           {"model": "builtin/no-such-model", "benchmark": "demo_add"}]}))
    bad = CliRunner().invoke(app, ["job", "run", str(tasks), "--dry-run", "--log-base", str(tmp_path / "log")])
    assert bad.exit_code == 2 and "task 1:" in bad.output and "no-such-model" in bad.output, bad.output
    tasks.write_text(json.dumps({"tasks": [{"model": "builtin/tiny-qwen2", "benchmark": "demo_add"}]}))
    with counting() as counter:
        good = CliRunner().invoke(app, ["job", "run", str(tasks), "--dry-run", "--json",
                                        "--log-base", str(tmp_path / "log")])
    assert good.exit_code == 0, good.output
    from ftagent.benchmarks import get_benchmark

    argv = json.loads(good.output)["tasks"][0]["argv"]
    assert argv[argv.index("--benchmark-description") + 1] == get_benchmark("demo_add").spec.description
    assert counter.count("registry") <= 2, counter.summary()["callers"]  # the tasks.json check + start-up


def test_one_owner_of_the_ft_file_path_layout():
    """Folders under FT_FILE_PATH are named in ftagent/core/paths.py only (one place to move one)."""
    import re

    root = Path(__file__).resolve().parents[2]
    by_hand = re.compile(r"""file_path\)?\s*/\s*["'](benchmarks|datasets|models|envs|eval_cache|baseline|docker|"""
                         r"""\.llama_factory_info)["']""")
    found = [f"{path.relative_to(root)}:{n}: {line.strip()}"
             for path in sorted((root / "ftagent").rglob("*.py")) if path.name != "paths.py"
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if by_hand.search(line)]
    assert not found, "\n".join(found)
