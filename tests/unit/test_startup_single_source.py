"""Issue 33 items 1+2: the resolved facts live in :class:`ResolvedRun` alone and every command starts
through the one start-up sequence (:func:`ftagent.finetune.start.start`)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ftagent.benchmarks.registry import BENCHMARKS
from ftagent.core.settings import load_settings

REPO = Path(__file__).resolve().parents[2]
BENCH = """\
name: my_single_bench
description: "Reply with the number only."
data: {file: my_single_bench.jsonl}
prompt: "{question}"
answer: answer
metric: exact_match
related_datasets: [demo_add]
"""


@pytest.fixture(autouse=True)
def _fresh(monkeypatch, tmp_path):
    monkeypatch.setattr(BENCHMARKS, "_user", {})
    monkeypatch.delenv("FT_BENCHMARK_PATHS", raising=False)
    monkeypatch.setenv("FT_FILE_PATH", str(tmp_path / "ft"))
    monkeypatch.setenv("FT_PLANNER", "heuristic")


def _bench_file(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "my_single_bench.jsonl").open("w", encoding="utf-8") as fh:
        for i in range(12):
            fh.write(json.dumps({"question": f"What is {i} + {i}?", "answer": str(2 * i)}) + "\n")
    path = folder / "my_single_bench.yaml"
    path.write_text(BENCH, encoding="utf-8")
    return path


def test_resolve_run_leaves_the_settings_as_given(tmp_path: Path) -> None:
    """Before: the benchmark file became its key, an empty description the benchmark's, a dataset file
    its copy's name, all written back into settings.ft (two forms of one fact side by side)."""
    from ftagent.finetune.resolve import resolve_run

    bench = _bench_file(tmp_path / "b")
    data = tmp_path / "mine.jsonl"
    data.write_text(json.dumps({"instruction": "Name a colour.", "input": "", "output": "blue"}) + "\n",
                    encoding="utf-8")
    settings = load_settings(target_benchmark=str(bench), base_model="builtin/tiny-qwen2", dataset=str(data))
    before = settings.ft.model_dump()
    run = resolve_run(settings)
    assert settings.ft.model_dump() == before
    assert (run.benchmark, run.dataset, run.dataset_file) == ("my_single_bench", "mine", str(data))
    assert run.description == "Reply with the number only." and run.planner == "heuristic"
    assert run.base_model == run.model.name == "builtin/tiny-qwen2"


# `ft.x = ...`, `a, ft.x = ...`, `ft.x, a = ...`, `setattr(settings.ft, ...)`
_WRITE = r"^ *([A-Za-z_.]+ *, *)*[A-Za-z_.]*\bft\.[a-z_]+( *, *[A-Za-z_.]+)* *=[^=]|setattr\([a-z_.]*\bft\b"


def test_no_settings_ft_write_outside_settings_loading() -> None:
    """No `settings.ft.X =` / `ft.X =` write in ftagent/ except core/settings*.py (what `git grep` would find)."""
    pattern = re.compile(_WRITE)
    files = sorted((REPO / "ftagent").rglob("*.py"))
    assert len(files) > 100  # the source tree itself (a wheel-only install has nothing to check)
    writes = [f"{path.relative_to(REPO)}:{n}: {line}" for path in files
              if not path.relative_to(REPO).as_posix().startswith("ftagent/core/settings")
              for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert writes == []
    for write in ("    dataset_file, ft.dataset = x, y", "ft.a, b = 1, 2", "    settings.ft.planner = 'h'"):
        assert re.search(_WRITE, write), write
    for read in ("if ft.x == 1:", "    f(ft.a, key=1)", "    x = ft.a"):
        assert not re.search(_WRITE, read), read


class _Marker(Exception):
    pass


class PluginScenario:
    """A plug-in ``FT_SCEN``: takes ``run=`` (required) like the built-in builder."""

    seen: dict = {}

    def __init__(self, settings, runner, emit, *, run) -> None:
        PluginScenario.seen.update(run=run, runner=runner)

    def prepare(self):
        return "prepared"

    def build(self, prepared):
        return f"scenario from {prepared}"


def test_prompts_builds_the_scenario_with_ft_scen(monkeypatch) -> None:
    """Before: `ftagent prompts` built FinetuneScenario whatever FT_SCEN said."""
    from ftagent.cli import prompts

    monkeypatch.setenv("FT_SCEN", f"{__name__}:PluginScenario")
    PluginScenario.seen.clear()
    settings, scenario, *_ = prompts._load("demo_add", "builtin/tiny-qwen2", None, "demo_add")
    assert scenario == "scenario from prepared"
    run = PluginScenario.seen["run"]
    assert run.benchmark == "demo_add" and run.planner == "heuristic"  # offline: the rule chooses the data
    assert settings.ft.planner == "heuristic" and settings.ft.scen.endswith("PluginScenario")


def test_prompts_path_registers_the_sessions_benchmark_file(tmp_path: Path, monkeypatch) -> None:
    """Before: with --path only the key was read; a session on a user YAML had a key no registry knew."""
    from ftagent.benchmarks import get_benchmark
    from ftagent.cli import prompts
    from ftagent.engine.session import Session

    bench = _bench_file(tmp_path / "b")
    from ftagent.finetune.state import FinetuneSessionState

    # the real state class (prompts checks it), built unvalidated around the stand-in scenario and trace
    state = FinetuneSessionState.model_construct(
        scenario="stored scenario", trace="trace", current=None,
        config={"run": {"benchmark": "my_single_bench", "benchmark_file": str(bench),
                        "base_model": "builtin/tiny-qwen2"}})
    monkeypatch.setattr(Session, "load", classmethod(lambda cls, path, state_cls: (type("S", (), {"state": state})(),
                                                                                   path)))
    with pytest.raises(Exception, match="my_single_bench"):
        get_benchmark("my_single_bench")
    settings, scenario, trace, _, _ = prompts._load(None, None, tmp_path, None)
    assert (scenario, trace) == ("stored scenario", "trace")
    assert get_benchmark("my_single_bench").spec.description == "Reply with the number only."


def _options(**kw):
    from ftagent.finetune.app import FinetuneOptions

    return FinetuneOptions(benchmark="demo_add", base_model="builtin/tiny-qwen2", **kw)


COMMANDS = {
    "llm_finetune": lambda tmp: __import__("ftagent.finetune.app", fromlist=["x"]).run_finetune(_options()),
    "plan": lambda tmp: __import__("ftagent.finetune.plan", fromlist=["x"]).plan_finetune(_options()),
    "prompts": lambda tmp: __import__("ftagent.cli.prompts", fromlist=["x"])._load("demo_add", "builtin/tiny-qwen2",
                                                                                   None, None),
    "eval": lambda tmp: __import__("ftagent.finetune.score", fromlist=["x"]).run_eval("builtin/tiny-qwen2",
                                                                                      "demo_add"),
    "job": lambda tmp: __import__("ftagent.finetune.start", fromlist=["x"]).resolve_tasks(
        [type("T", (), {"benchmark": "demo_add", "model": "builtin/tiny-qwen2", "benchmark_description": None})()]),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_starts_through_the_one_startup(command, tmp_path: Path, monkeypatch) -> None:
    import ftagent.finetune.start as start_mod

    calls = []

    def fake_start(**kw):
        calls.append(kw)
        raise _Marker

    monkeypatch.setattr(start_mod, "start", fake_start)
    with pytest.raises(_Marker):
        COMMANDS[command](tmp_path)
    assert calls and calls[0]["benchmark"] == "demo_add" and calls[0]["base_model"] == "builtin/tiny-qwen2"
