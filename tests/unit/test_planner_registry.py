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
    from ftagent.finetune.app import choose_planner
    from ftagent.finetune.workflow import build_components

    settings = load_settings(planner="Echo", env_type="local", file_path=tmp_path / "ff")
    planner = choose_planner(settings)
    assert planner == "echo"
    info = ScenarioInfo(benchmark="demo_add", base_model="builtin/tiny-qwen2", base_model_path=str(tmp_path),
                        file_path=str(tmp_path / "ff"), workspace_root=str(tmp_path / "ws"))
    components = build_components(info, settings, None, planner)
    assert type(components.proposer) is EchoProposer and isinstance(components.coder, HeuristicCoder)
    # it declares it writes LLM code: without bubblewrap it is refused like the llm planner, whatever its name
    monkeypatch.setattr(sandbox, "probe_bwrap", lambda executable=None: (False, "bwrap is not installed"))
    with pytest.raises(UserInputError, match="never runs unconfined"):
        sandbox.require_confinement(settings, registry.writes_llm_code(planner, settings.ft.coder))


def test_an_unknown_planner_is_one_did_you_mean(tmp_path: Path) -> None:
    from ftagent.finetune.app import choose_planner

    with pytest.raises(UserInputError, match="unknown FT_PLANNER planner 'heuristik'.*Did you mean 'heuristic'"):
        choose_planner(load_settings(planner="heuristik", file_path=tmp_path / "ff"))


def test_the_builtin_planners_declare_what_they_do() -> None:
    llm, heuristic = registry.planner_spec("llm"), registry.planner_spec("heuristic")
    assert llm.writes_llm_code and llm.selects_datasets
    assert not heuristic.writes_llm_code and not heuristic.selects_datasets
