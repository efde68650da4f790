"""K trials at once (issue 41): distinct proposals, told what runs, K asked at once (both planners).

The LLM planner is driven through the real OpenAI-compatible HTTP server of tests/fakes; the offline
planner spreads the round over learning rates, lengths and methods.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from ftagent.core.settings import FTSettings, LLMSettings, PathSettings, Settings
from ftagent.core.trace import Experiment, Trace
from ftagent.core.types import EvalResult, Hypothesis, ModelInfo, ScenarioInfo
from ftagent.engine.event_log import EventLog
from ftagent.engine.loop import StepContext
from ftagent.engine.session import Session
from ftagent.finetune.proposals import Proposals, recipe_key
from ftagent.planners.heuristic.planner import HeuristicProposer
from ftagent.planners.llm.propose import LLMProposer
from tests.fakes.openai_server import FakeOpenAIServer, Reply
from tests.unit._workflows import RecordedLoop, TraceState


@pytest.fixture()
def scenario(tmp_path: Path) -> ScenarioInfo:
    return ScenarioInfo(benchmark="demo", benchmark_description="add two numbers", base_model="builtin/tiny",
                        base_model_path="/models/tiny", file_path=str(tmp_path), workspace_root=str(tmp_path / "ws"),
                        model_info=ModelInfo(name="builtin/tiny", path="/models/tiny", template="qwen",
                                             num_parameters=1_000_000, max_position_embeddings=1024),
                        baseline=EvalResult(benchmark="demo", split="validation", core_metric="accuracy", score=0.2))


class _Ctx(StepContext):
    """A trial's context: its loop and the peers in flight (what ftagent.engine.parallel.TrialContext gives)."""

    def __init__(self, session: Session, peers: list[RecordedLoop]) -> None:
        super().__init__(session, EventLog(session.events_path), None, time.time)
        self._peers = peers

    def peers(self) -> list[RecordedLoop]:
        return self._peers


def _ctx(tmp_path: Path, peers: list[RecordedLoop]) -> _Ctx:
    session = Session.create(tmp_path / "log", state_cls=TraceState)
    session.state.current = RecordedLoop(index=0)
    return _Ctx(session, peers)


def test_the_offline_planner_spreads_a_round_over_distinct_recipes(scenario: ScenarioInfo) -> None:
    proposer = HeuristicProposer(scenario)
    batch = proposer.propose_batch(Trace(), None, n=4, running=[])
    recipes = [h.plan["recipe"] for h in batch]
    assert len({json.dumps(r, sort_keys=True) for r in recipes}) == 4
    base = recipes[0]
    assert [r["learning_rate"] / base["learning_rate"] for r in recipes[1:3]] == [0.5, 2.0]
    assert recipes[3]["max_steps"] == 2 * base["max_steps"]
    assert "Variant for a parallel trial: learning rate ÷2" in batch[1].hypothesis
    # told what runs: the policy's own next recipe is running already, so the first offered is a variant
    again = proposer.propose_batch(Trace(), None, n=1, running=batch[:1])
    assert recipe_key(again[0]) != recipe_key(batch[0])


def test_proposals_ask_once_for_the_waiting_trials_and_drop_the_queue_when_the_trace_changes(
        tmp_path: Path, scenario: ScenarioInfo) -> None:
    calls: list[tuple[int, int]] = []
    inner = HeuristicProposer(scenario)

    class Counting:
        def propose(self, trace, ctx):  # pragma: no cover - only the batch is used
            raise AssertionError

        def propose_batch(self, trace, ctx, *, n, running):
            calls.append((n, len(running)))
            return inner.propose_batch(trace, ctx, n=n, running=running)

    proposals, trace = Proposals(), Trace()
    waiting = RecordedLoop(index=1)  # a peer at its first step: it proposes next
    first = proposals.next(Counting(), trace, _ctx(tmp_path, [waiting]))
    assert calls == [(2, 0)]
    busy = RecordedLoop(index=0, next_step=2)
    busy_h = first
    second = proposals.next(Counting(), trace, _ctx(tmp_path / "b", [SimpleNamespace(
        hypothesis=busy_h, next_step=busy.next_step)]))
    assert calls == [(2, 0)] and recipe_key(second) != recipe_key(first)  # taken from the queue, no new call
    proposals.next(Counting(), trace, _ctx(tmp_path / "c", [RecordedLoop(index=5)]))  # queue empty: asks again
    proposals._queue = [((0, None), first)]
    trace.record(Experiment(loop=0, val_score=1.0))  # a trial's feedback arrived: the queued proposal is stale
    proposals.next(Counting(), trace, _ctx(tmp_path / "d", []))
    assert calls[-1] == (1, 0) and len(calls) == 3


def test_the_llm_planner_is_asked_for_k_at_once_and_told_what_runs(tmp_path: Path, scenario: ScenarioInfo) -> None:
    proposals = [{"reason": f"r{i}", "hypothesis": f"idea {i}", "task": f"task {i}", "skip_data_processing": False}
                 for i in range(2)]
    running = [Hypothesis(hypothesis="a running idea about the learning rate", task="train lr 1e-4")]
    with FakeOpenAIServer() as server:
        server.queue(Reply(content=json.dumps({"proposals": proposals})))
        llm = LLMSettings(chat_model="fake-model", openai_api_key="sk-test-000000", chat_stream=False,
                          openai_api_base=server.base_url, max_retry=1, retry_wait_seconds=0.01, chat_model_map={})
        settings = Settings(FTSettings(), llm, PathSettings())
        ctx = _ctx(tmp_path, [])
        out = LLMProposer(scenario, settings).propose_batch(Trace(baseline_val=0.2), ctx, n=2, running=running)
        body = server.chat_requests[0].raw
    assert [h.hypothesis for h in out] == ["idea 0", "idea 1"] and all(h.planner == "llm" for h in out)
    assert "Propose\\n2 different ones" in body or "Propose 2 different ones" in body.replace("\\n", " ")
    assert "holding exactly 2 objects" in body
    assert "Running now on the other slots" in body and "a running idea about the learning rate" in body
