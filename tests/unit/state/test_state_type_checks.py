"""What each declared ``Types.*`` type accepts in state, and the text checkpoints store for it.

The accepted and refused values follow PyFlink 2.3's coders (see the docstring of
``tests/integration/test_state_types.py`` for what was checked on PyFlink), minus its lossy
conversions (a float into LONG, an int into BOOLEAN, a datetime into SQL_DATE).
"""

from __future__ import annotations

import datetime
import decimal

import numpy as np
import pytest

from flinklike_spark._runtime.state.keyed_state import HeapKeyedStateBackend
from flinklike_spark._runtime.state.state_types import value_check
from flinklike_spark.common import Row, Types
from flinklike_spark.common.typeinfo import parse_type_info
from flinklike_spark.datastream.state import (
    AggregatingStateDescriptor,
    ReducingStateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
)
from flinklike_spark.datastream.window import Time
from flinklike_spark.errors import ConfigurationError, StateTypeError

pytestmark = pytest.mark.timeout(60)

ROW = Types.ROW_NAMED(["a", "b"], [Types.LONG(), Types.STRING()])
CASES = [
    (Types.LONG(), [5, True, -(2**63), 2**63 - 1, np.int64(3)], ["5", 2**63, 5.0, decimal.Decimal(3)]),
    (Types.INT(), [5, 2**31 - 1], [2**31, "5"]),
    (Types.BYTE(), [127], [128]),
    (Types.DOUBLE(), [1.5, 1, True, np.float32(1)], ["1.5", decimal.Decimal("1.5")]),
    (Types.STRING(), ["a"], [1, b"a"]),
    (Types.BOOLEAN(), [True, np.bool_(False)], [1, 1.0, "x"]),
    (Types.BIG_DEC(), [decimal.Decimal("1.5"), 1], ["1.5", 1.5]),
    (Types.SQL_DATE(), [datetime.date(2020, 1, 1)], [datetime.datetime(2020, 1, 1), "2020-01-01"]),
    (Types.SQL_TIMESTAMP(), [datetime.datetime(2020, 1, 1)], [datetime.date(2020, 1, 1), 5]),
    (
        ROW,
        [Row(a=1, b="x"), Row(1, "x"), Row(b="x", a=1), Row(a=None, b=None)],
        [(1, "x"), [1, "x"], {"a": 1, "b": "x"}, Row(a=1), Row(a="1", b="x"), Row(1, "x", 3), Row(a=1, c="x")],
    ),
    (Types.ROW([Types.LONG(), Types.STRING()]), [Row(1, "x")], [Row(a=1, b="x"), (1, "x")]),
    (Types.TUPLE([Types.LONG(), Types.STRING()]), [(1, "x"), (None, None)], [[1, "x"], (1, "x", 3), (1,)]),
    (Types.LIST(Types.LONG()), [[1, 2], [1, None], []], [(1, 2), [1, "x"], {1}, "ab"]),
    (Types.PRIMITIVE_ARRAY(Types.LONG()), [[1, 2]], [[1, None]]),
    (Types.PRIMITIVE_ARRAY(Types.BYTE()), [b"ab", bytearray(b"ab")], [[1, 2], "ab"]),
    (Types.MAP(Types.STRING(), Types.LONG()), [{"a": 1}, {"a": None}, {}], [{"a": "x"}, {1: 1}, {None: 1}, [("a", 1)]]),
]


@pytest.mark.parametrize(("type_info", "accepted", "refused"), CASES, ids=[repr(c[0]) for c in CASES])
def test_a_declared_type_accepts_its_values_and_refuses_others(type_info, accepted, refused):
    check = value_check(type_info, "test")
    assert [v for v in accepted if not check(v)] == []
    assert [v for v in refused if check(v)] == []
    assert parse_type_info(repr(type_info)) == type_info


def test_undeclared_and_pickled_types_check_nothing_and_a_non_type_is_refused():
    assert value_check(None, "s") is None and value_check(Types.PICKLED_BYTE_ARRAY(), "s") is None
    with pytest.raises(ConfigurationError, match=r"Types.LONG\(\) \(note the call\)"):
        value_check(Types.LONG, "state 'n'")
    with pytest.raises(ConfigurationError, match="not a Types"):
        parse_type_info("__import__('os').system('true')")


def _backend() -> HeapKeyedStateBackend:
    backend = HeapKeyedStateBackend(max_parallelism=128)
    backend.owner = "operator 'op' (uid 'u')"
    backend.current_key = "k"
    return backend


def test_reducing_and_aggregating_state_check_what_they_store():
    backend = _backend()
    reducing = backend.get_state(
        ReducingStateDescriptor("r", lambda a, b: f"{a}{b}", Types.LONG()), ReducingStateDescriptor
    )
    reducing.add(1)
    with pytest.raises(StateTypeError, match="the reduce function's result is str '12'"):
        reducing.add(2)
    with pytest.raises(StateTypeError, match="the value added is str 'x'"):
        reducing.add("x")

    class Concat:
        def create_accumulator(self):
            return 0

        def add(self, value, accumulator):
            return accumulator + value

        def get_result(self, accumulator):
            return accumulator

        def merge(self, a, b):
            return a + b

    aggregating = backend.get_state(AggregatingStateDescriptor("a", Concat(), Types.LONG()), AggregatingStateDescriptor)
    aggregating.add(2)
    assert aggregating.get() == 2
    with pytest.raises(StateTypeError, match=r"the accumulator add\(\) returned is float 2.5"):
        aggregating.add(0.5)


def test_state_with_time_to_live_checks_the_user_value():
    backend = _backend()
    descriptor = ValueStateDescriptor("ttl", Types.STRING())
    descriptor.enable_time_to_live(StateTtlConfig.new_builder(Time.seconds(60)).build())
    state = backend.get_state(descriptor, ValueStateDescriptor)
    state.update("fine")
    assert state.value() == "fine"
    with pytest.raises(
        StateTypeError, match=r"operator 'op' \(uid 'u'\): state 'ttl'.*for key 'k', the value written is int 3"
    ):
        state.update(3)
