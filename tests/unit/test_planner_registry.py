"""Issue 33: a new planner is one file plus one registration, and what it declares decides the sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftagent.core.errors import UserInputError
from ftagent.core.settings import load_settings
from ftagent.core.types import ScenarioInfo
from ftagent.planners import registry
from ftagent.planners.heuristic.planner import HeuristicCoder, HeuristicFeedback, HeuristicProposer
from ftagent.runners import sandbox
from tests.helpers.resolved_run import resolved_run

HERE = __name__


class EchoProposer(HeuristicProposer):
    """The plug-in's proposer (its coder writes code an LLM wrote: ``writes_llm_code`` below)."""


SPEC = registry.PlannerSpec(name="echo", proposer=f"{HERE}:EchoProposer",
                            coder=f"{HeuristicCoder.__module__}:HeuristicCoder",
                            feedback=f"{HeuristicFeedback.__module__}:HeuristicFeedback", writes_llm_code=True)


@pytest.fixture
def echo(monkeypatch):
    monkeypatch.setitem(registry.PLANNERS._objects, "echo", SPEC)  # = registry.register_planner(SPEC)


def test_a_registered_planner_is_chosen_built_and_confined(echo, tmp_path: Path, monkeypatch) -> None:
    from ftagent.finetune.components import build_components
    from ftagent.finetune.resolve import resolve_run

    settings = load_settings(planner="Echo", env_type="local", file_path=tmp_path / "ff", target_benchmark="demo_add",
                             base_model="builtin/tiny-qwen2", dataset="demo_add")
    planner = resolve_run(settings).planner  # start-up resolves FT_PLANNER against the registry
    assert planner == "echo"
    info = ScenarioInfo(benchmark="demo_add", base_model="builtin/tiny-qwen2", base_model_path=str(tmp_path),
                        file_path=str(tmp_path / "ff"), workspace_root=str(tmp_path / "ws"))
    components = build_components(info, settings, None, planner, run=resolved_run(planner=planner))
    assert type(components.proposer) is EchoProposer and isinstance(components.coder, HeuristicCoder)
    # it declares it writes LLM code: without bubblewrap it is refused like the llm planner, whatever its name
    monkeypatch.setattr(sandbox, "probe_bwrap", lambda executable=None: (False, "bwrap is not installed"))
    with pytest.raises(UserInputError, match="never runs unconfined"):
        sandbox.require_confinement(settings, registry.writes_llm_code(planner, settings.ft.coder))


def test_an_unknown_planner_is_one_did_you_mean(tmp_path: Path) -> None:
    from ftagent.finetune.resolve import resolve_run

    with pytest.raises(UserInputError, match="unknown FT_PLANNER planner 'heuristik'.*Did you mean 'heuristic'"):
        resolve_run(load_settings(planner="heuristik", file_path=tmp_path / "ff", target_benchmark="demo_add",
                                  base_model="builtin/tiny-qwen2"))


def test_the_builtin_planners_declare_what_they_do() -> None:
    llm, heuristic = registry.planner_spec("llm"), registry.planner_spec("heuristic")
    assert llm.writes_llm_code and llm.selects_datasets
    assert not heuristic.writes_llm_code and not heuristic.selects_datasets
    assert llm.generates_data and llm.asks_llm and not heuristic.generates_data and not heuristic.asks_llm
    assert heuristic.loop_growth == 2.0 and llm.loop_growth == 1.0


def test_the_training_source_check_reads_the_declared_capability(echo, tmp_path: Path, monkeypatch) -> None:
    """A plug-in planner that generates its own rows trains without --dataset, whatever its name."""
    from ftagent.finetune.resolve import check_training_source

    monkeypatch.setenv("FT_FILE_PATH", str(tmp_path / "ft"))
    with pytest.raises(UserInputError, match="has no training data"):
        check_training_source("echo", None, "times_three", [])
    monkeypatch.setitem(registry.PLANNERS._objects, "echo", SPEC.model_copy(update={"generates_data": True}))
    check_training_source("echo", None, "times_three", [])
