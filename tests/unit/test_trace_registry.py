"""The numeric SOTA rule and the lazy registry."""

from __future__ import annotations

import pytest

from ftagent.core.errors import UserInputError
from ftagent.core.registry import Registry, load_object
from ftagent.core.trace import Experiment, Trace, beats


@pytest.mark.parametrize("cand,inc,direction,delta,expected", [
    (0.5, 0.4, "max", 0.0, True),
    (0.4, 0.4, "max", 0.0, False),  # a tie keeps the incumbent
    (0.45, 0.4, "max", 0.05, False),  # within the margin
    (0.46, 0.4, "max", 0.05, True),
    (0.3, 0.4, "min", 0.0, True),  # lower is better
    (0.5, 0.4, "min", 0.0, False),
    (0.1, None, "max", 0.5, True),  # no incumbent: any score wins
    (None, 0.1, "max", 0.0, False),
])
def test_beats(cand, inc, direction, delta, expected):
    assert beats(cand, inc, direction, delta) is expected


def test_trace_keeps_sota_and_baseline():
    trace = Trace(baseline_val=0.2)
    assert trace.incumbent_score() == 0.2 and not trace.is_new_sota(0.2, 0.0)
    trace.record(Experiment(loop=0, val_score=0.5, decision=True))
    trace.record(Experiment(loop=1, parent=0, val_score=0.4, decision=False))
    assert trace.sota().loop == 0 and trace.incumbent_score() == 0.5
    assert [e.loop for e in trace.siblings(0)] == [1]
    trace.record(Experiment(loop=2, parent=0, val_score=0.7, decision=True))
    assert trace.sota_loop == 2


def test_registry_lazy_import_and_did_you_mean():
    reg: Registry[object] = Registry("widget")
    reg.register("json-dumps", "json:dumps")
    reg.register("path", "pathlib.Path")
    import json

    assert reg.get("json-dumps") is json.dumps
    with pytest.raises(UserInputError, match="Did you mean 'json-dumps'"):
        reg.get("json-dump")
    assert reg.names() == ["json-dumps", "path"]


def test_load_object_errors_are_user_errors():
    with pytest.raises(UserInputError, match="cannot import"):
        load_object("no_such_module_xyz:Thing")
    with pytest.raises(UserInputError, match="has no attribute"):
        load_object("json:nope")
    with pytest.raises(UserInputError, match="dotted path"):
        load_object("justname")
