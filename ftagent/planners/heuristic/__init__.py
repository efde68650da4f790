"""The offline heuristic planner: a fixed policy over the trace (no LLM).
"""

from ftagent.core.lazy import lazy_exports

__all__ = ['HeuristicProposer', 'HeuristicCoder', 'HeuristicFeedback']
__getattr__ = lazy_exports(__name__, {
    "HeuristicProposer": "ftagent.planners.heuristic.planner",
    "HeuristicCoder": "ftagent.planners.heuristic.planner",
    "HeuristicFeedback": "ftagent.planners.heuristic.planner",
})
