"""``KeyedBroadcastProcessFunction.Context.apply_to_keyed_state`` (PyFlink's): a broadcast element
reaches every key's keyed state, on both state backends."""

from __future__ import annotations

import pytest

from flinklike_spark._runtime.operators.co_operators import _CoContext
from flinklike_spark.datastream.functions import KeyedBroadcastProcessFunction
from flinklike_spark.datastream.state import ValueStateDescriptor

pytestmark = pytest.mark.timeout(60)


class _Operator:
    """What the context reads of its operator: the keyed state backend and the broadcast states."""

    def __init__(self, backend) -> None:
        self.backend = backend
        self.broadcast_states: dict = {}


def test_apply_to_keyed_state_visits_every_key_and_can_update_it(make_backend):
    backend = make_backend()
    counts = backend.get_state(ValueStateDescriptor("count"), ValueStateDescriptor)
    other = backend.get_state(ValueStateDescriptor("other"), ValueStateDescriptor)
    for key, n in (("a", 1), ("b", 2), ("c", 3)):
        backend.current_key = key
        counts.update(n)
    backend.current_key = "z"
    other.update(99)  # holds no "count": not visited
    ctx = _CoContext(_Operator(backend))
    ctx.broadcast_side = True
    backend.current_key = "b"
    seen = {}

    def double(key, state):
        seen[key] = state.value()
        state.update(state.value() * 2)

    assert isinstance(ctx, KeyedBroadcastProcessFunction.Context)
    ctx.apply_to_keyed_state(ValueStateDescriptor("count"), double)
    assert seen == {"a": 1, "b": 2, "c": 3}
    assert backend.current_key == "b"  # the broadcast element's key context is left as it was
    doubled = {}
    for key in ("a", "b", "c", "z"):
        backend.current_key = key
        doubled[key] = counts.value()
    assert doubled == {"a": 2, "b": 4, "c": 6, "z": None}


def test_apply_to_keyed_state_belongs_to_the_broadcast_side(make_backend):
    ctx = _CoContext(_Operator(make_backend()))
    with pytest.raises(TypeError, match="process_broadcast_element"):
        ctx.apply_to_keyed_state(ValueStateDescriptor("count"), lambda key, state: None)
    ctx = _CoContext(_Operator(None))
    ctx.broadcast_side = True
    with pytest.raises(TypeError, match="KeyedBroadcastProcessFunction"):
        ctx.apply_to_keyed_state(ValueStateDescriptor("count"), lambda key, state: None)
