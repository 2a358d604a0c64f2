import pyarrow as pa
import pytest

from checkpointing import KeyedStateSnapshot, StateKind
from flinklike_spark import (
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    SchemaMismatchError,
    TimeDomain,
    ValueStateDescriptor,
)
from flinklike_spark._runtime.operators.rows import RowsConverter
from flinklike_spark._runtime.operators.timers import KeyedTimers


class TestRowsConverter:
    def test_infers_then_fixes_schema(self):
        converter = RowsConverter(None, stream_name="Map")
        batch = converter.to_batch([{"a": 1, "b": "x"}, {"a": 2, "b": "y"}])
        assert batch.schema == pa.schema([("a", pa.int64()), ("b", pa.string())])
        assert converter.to_batch([{"a": 3, "b": "z"}]).to_pylist() == [{"a": 3, "b": "z"}]

    def test_missing_and_extra_fields_are_named(self):
        converter = RowsConverter(pa.schema([("a", pa.int64()), ("b", pa.string())]), stream_name="Map")
        with pytest.raises(SchemaMismatchError, match=r"missing fields \['b'\], unexpected fields \['c'\]"):
            converter.to_batch([{"a": 1, "b": "x"}, {"a": 1, "c": 2}])

    def test_wrong_type_names_field_value_and_type(self):
        converter = RowsConverter(pa.schema([("a", pa.int64())]), stream_name="Map")
        with pytest.raises(SchemaMismatchError, match=r"field 'a' .* value 'oops' \(str\).*int64"):
            converter.to_batch([{"a": 1}, {"a": "oops"}])

    def test_non_dict_row(self):
        converter = RowsConverter(None, stream_name="Map")
        with pytest.raises(SchemaMismatchError, match="must return rows as dict"):
            converter.to_batch([{"a": 1}, (1, 2)])


class TestKeyedState:
    def test_states_are_scoped_to_current_key(self, make_backend):
        backend = make_backend()
        value = backend.get_state(ValueStateDescriptor("v"), ValueStateDescriptor)
        items = backend.get_state(ListStateDescriptor("l"), ListStateDescriptor)
        mapping = backend.get_state(MapStateDescriptor("m"), MapStateDescriptor)
        total = backend.get_state(ReducingStateDescriptor("r", reduce_function=lambda a, b: a + b),
                                  ReducingStateDescriptor)  # fmt: skip
        for key in ("a", "b"):
            backend.current_key = key
            value.update(key.upper())
            items.add(key)
            items.add(key * 2)
            mapping.put("k", key)
            total.add(1)
            total.add(2)
        backend.current_key = "a"
        assert value.value() == "A"
        assert items.get() == ["a", "aa"]
        assert mapping.get("k") == "a"
        assert total.get() == 3
        value.clear()
        assert value.value() is None
        backend.current_key = "b"
        assert value.value() == "B"

    def test_same_name_other_kind_is_rejected(self, make_backend):
        backend = make_backend()
        backend.get_state(ValueStateDescriptor("s"), ValueStateDescriptor)
        with pytest.raises(ValueError, match="registered as ValueStateDescriptor"):
            backend.get_state(ListStateDescriptor("s"), ListStateDescriptor)

    def test_snapshot_is_deep(self, make_backend):
        from flinklike_spark._runtime.state.key_groups import key_group_for

        backend = make_backend()
        items = backend.get_state(ListStateDescriptor("l"), ListStateDescriptor)
        backend.current_key = 1
        items.add("x")
        snapshot = backend.snapshot_entries()
        items.add("y")
        assert snapshot == [
            KeyedStateSnapshot(name="l", kind=StateKind.LIST, entries=[(key_group_for(1, 128), 1, ["x"])])
        ]


class TestTimers:
    def test_event_timers_fire_in_order_once_and_deduplicated(self):
        timers = KeyedTimers()
        for ts, key in [(30, "a"), (10, "b"), (10, "b"), (20, "a")]:
            timers.event_time.add(ts, key)
        timers.event_time.delete(20, "a")
        fired = []
        timers.advance_watermark(25, lambda ts, key, domain: fired.append((ts, key, domain)))
        assert fired == [(10, "b", TimeDomain.EVENT_TIME)]
        timers.advance_watermark(40, lambda ts, key, domain: fired.append((ts, key, domain)))
        assert fired[1:] == [(30, "a", TimeDomain.EVENT_TIME)]
        assert len(timers.event_time) == 0

    def test_timer_registered_while_firing_fires_in_same_advance(self):
        timers = KeyedTimers()
        timers.event_time.add(5, "k")
        fired = []

        def fire(ts, key, domain):
            fired.append(ts)
            if ts == 5:
                timers.event_time.add(7, key)

        timers.advance_watermark(10, fire)
        assert fired == [5, 7]

    def test_processing_time_next_skips_deleted(self):
        timers = KeyedTimers()
        timers.processing_time.add(100, "a")
        timers.processing_time.add(200, "a")
        timers.processing_time.delete(100, "a")
        assert timers.next_processing_time() == 200
