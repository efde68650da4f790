"""The fine-tuning state accessors narrow the engine's base state with a check, not a cast (issue 33 item 5):
a session built with the engine's own SessionState fails at the accessor, naming the class, instead of
an AttributeError deep in a step."""

import pytest

from ftagent.engine.session import LoopState, Session, SessionState
from ftagent.finetune.state import FinetuneLoop, FinetuneSessionState, finetune_loop, finetune_state


def test_a_fine_tuning_session_state_passes_through_unchanged(tmp_path):
    session = Session.create(tmp_path / "log", state_cls=FinetuneSessionState)
    assert finetune_state(session.state) is session.state
    loop = FinetuneLoop(index=0)
    assert finetune_loop(loop) is loop


def test_the_engine_s_base_state_is_refused_naming_its_class(tmp_path):
    session = Session.create(tmp_path / "log")  # the engine's default: SessionState, no scenario or trace
    with pytest.raises(TypeError, match="FinetuneSessionState, got SessionState"):
        finetune_state(session.state)
    with pytest.raises(TypeError, match="FinetuneLoop, got LoopState"):
        finetune_loop(LoopState(index=0))
    assert isinstance(session.state, SessionState)
