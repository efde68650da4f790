"""The one list of planners (``FT_PLANNER``): each entry names its components and declares what it does.

A planner is chosen by name; what it does is read from its :class:`PlannerSpec`, never from its name:
``writes_llm_code`` (its coder runs code an LLM wrote: the sandbox policy in
:func:`ftagent.runners.sandbox.require_confinement` then refuses to run unconfined) and
``selects_datasets`` (it may pick the training datasets where the rule cannot decide), ``generates_data``
(its data step may write training rows itself, so a benchmark without related datasets can still train)
and ``asks_llm`` (it sends prompts to ``CHAT_MODEL``: the forecast counts its calls). Third parties add
planners with the entry-point group ``ftagent.planners`` (value: ``"module:SPEC"``, a PlannerSpec) or
:func:`register_planner`: a new planner is one module plus one registration.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ftagent.core.registry import Registry, load_object

_HEURISTIC = "ftagent.planners.heuristic.planner"


class PlannerSpec(BaseModel):
    """One planner: its three components (``"module:Class"``) and its declared capabilities."""

    name: str
    proposer: str
    coder: str
    feedback: str
    writes_llm_code: bool = True  # the safe default for a plug-in: its code is confined
    selects_datasets: bool = False
    generates_data: bool = False  # False: without a --dataset or related datasets start-up refuses (exit 2)
    asks_llm: bool = False  # its proposer/coder/feedback call the chat model (counted by the forecast)
    loop_growth: float = 1.0  # the forecast's assumption: each later loop trains this many times as long


PLANNERS: Registry[PlannerSpec] = Registry("FT_PLANNER planner", entry_point_group="ftagent.planners")


def register_planner(spec: PlannerSpec) -> None:
    """Add (or replace) a planner under ``spec.name``."""
    PLANNERS.register(spec.name, spec)


register_planner(PlannerSpec(name="heuristic", proposer=f"{_HEURISTIC}:HeuristicProposer",
                             coder=f"{_HEURISTIC}:HeuristicCoder", feedback=f"{_HEURISTIC}:HeuristicFeedback",
                             writes_llm_code=False, selects_datasets=False, generates_data=False,
                             asks_llm=False, loop_growth=2.0))  # doubles after a success (planner.py)
register_planner(PlannerSpec(name="llm", proposer="ftagent.planners.llm.propose:LLMProposer",
                             coder="ftagent.planners.llm.code:LLMCoder",
                             feedback="ftagent.planners.llm.feedback:LLMFeedback",
                             writes_llm_code=True, selects_datasets=True, generates_data=True, asks_llm=True))


def resolve_planner(name: str, llm_configured: bool) -> str:
    """``FT_PLANNER`` to a registered name (``auto`` = ``llm`` when an LLM is configured, else ``heuristic``).

    Raises:
        UserInputError: an unknown planner name (with the closest registered one).
    """
    if name == "auto":
        return "llm" if llm_configured else "heuristic"
    PLANNERS.get(name)
    return name


def planner_spec(name: str) -> PlannerSpec:
    """The spec registered as ``name`` (a resolved name, not ``auto``)."""
    return PLANNERS.get(name)


def writes_llm_code(planner: str, coder: str = "auto") -> bool:
    """Whether a session with this planner and ``FT_CODER`` runs code an LLM wrote.

    A plug-in coder (``FT_CODER`` set) answers with its own ``writes_llm_code`` attribute; one that
    declares nothing is taken to write LLM code (LLM-written code never runs unconfined).
    """
    if coder != "auto":
        declared: Any = getattr(load_object(coder), "writes_llm_code", True)
        return declared if isinstance(declared, bool) else True
    return planner_spec(planner).writes_llm_code
