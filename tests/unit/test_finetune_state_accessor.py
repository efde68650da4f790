"""The fine-tuning loop accessor narrows the engine's base loop with a check, not a cast (issue 33 item 5): a
loop built as the engine's own LoopState fails at the accessor, naming the class, instead of an AttributeError
deep in a step. (The session's state needs no accessor since issue 45: ``Session[FinetuneSessionState]`` and
``StepContext[FinetuneSessionState]`` carry it, and mypy refuses another state: unit/test_session_state_types.py.)"""

import pytest

from ftagent.engine.session import LoopState
from ftagent.finetune.state import FinetuneLoop, finetune_loop


def test_a_fine_tuning_loop_passes_through_unchanged():
    loop = FinetuneLoop(index=0)
    assert finetune_loop(loop) is loop


def test_the_engine_s_base_loop_is_refused_naming_its_class():
    with pytest.raises(TypeError, match="FinetuneLoop, got LoopState"):
        finetune_loop(LoopState(index=0))
