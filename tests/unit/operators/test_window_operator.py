"""WindowOperator against independent plain-Python computations.

The operator is driven directly (rows, watermarks, processing time) through an
in-memory Output; expected results come from simple models that know nothing
of triggers, timers or panes. Snapshot/restore goes through pickle, and a
rescale splits the snapshot by key group exactly as the restore path does.
"""

from __future__ import annotations

import collections
import pickle
import random

import pytest

from checkpointing import KeyedStateSnapshot, StateKind
from flinklike_spark import WatermarkStrategy
from flinklike_spark._runtime.operators.operator_registry import create_operator
from flinklike_spark._runtime.operators.operator_spec import OperatorSpec
from flinklike_spark._runtime.operators.stream_operator import OperatorContext, RestoredEntry, RestoredState
from flinklike_spark._runtime.operators.window_descriptor import PaneKind, WindowOperatorDescriptor
from flinklike_spark._runtime.state.key_groups import key_group_range
from flinklike_spark.datastream.functions import (
    AggregateFunction,
    ProcessAllWindowFunction,
    ProcessWindowFunction,
    WindowFunction,
)
from flinklike_spark.datastream.output_tag import OutputTag
from flinklike_spark.datastream.state import ValueStateDescriptor
from flinklike_spark.datastream.window import (
    ContinuousEventTimeTrigger,
    CountSlidingWindowAssigner,
    CountTrigger,
    CountTumblingWindowAssigner,
    CountWindow,
    EventTimeSessionWindows,
    GlobalWindows,
    ProcessingTimeSessionWindows,
    PurgingTrigger,
    SlidingEventTimeWindows,
    Time,
    TimeWindow,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)
from flinklike_spark.errors import ConfigurationError
from tests.support.clocks import ManualClock
from tests.support.outputs import ListOutput

MAX_WATERMARK = 2**63 - 1
LATE = OutputTag("late")


#: state.backend.type and state.backend.rocksdb.* of the operators make() creates (set per test below).
_STATE_BACKEND: dict = {}


@pytest.fixture(autouse=True)
def _state_backend(state_backend_type, rocksdb_options):
    """Every window test runs on both keyed state backends (the window function's global state)."""
    _STATE_BACKEND.update(state_backend_type=state_backend_type, rocksdb=rocksdb_options)
    yield
    _STATE_BACKEND.clear()


def make(descriptor, *, restored=None, subtask=0, parallelism=1, clock=None, side=True, key_field="k"):
    spec = OperatorSpec(
        uid="window",
        name="window",
        kind="window",
        function=descriptor,
        key_field=key_field,
        key_selector=None if key_field else (lambda row: 0),
        timestamp_strategy=WatermarkStrategy().with_timestamp_assigner("ts"),
    )
    op = create_operator(spec)
    out, late = ListOutput(), ListOutput()
    context = OperatorContext(
        task_name="window",
        subtask_index=subtask,
        parallelism=parallelism,
        max_parallelism=128,
        attempt_number=0,
        clock_ms=clock or ManualClock(),
        **_STATE_BACKEND,
    )
    op.setup(context, out)
    if side:
        op.side_outputs = {LATE.tag_id: late}
    op.initialize_state(restored)
    op.open()
    # Records reach the operator with the timestamps the source's assigner gave them (column "ts").
    process_rows = op.process_rows
    op.process_rows = lambda rows: process_rows(rows, [row.get("ts") for row in rows])
    return op, out, late


def count_reduce(a, b):
    return {**a, "n": a["n"] + b["n"]}


def tumbling(size, lateness=0, late_data_tag=LATE, **extra):
    assigner = TumblingEventTimeWindows.of(Time.milliseconds(size))
    return WindowOperatorDescriptor(
        assigner=assigner,
        trigger=assigner.get_default_trigger(None),
        allowed_lateness=lateness,
        late_data_tag=late_data_tag,
        **extra,
    )


class KeyWindowCount(WindowFunction):
    def apply(self, key, window, inputs):
        yield {"k": key, "start": window.start, "end": window.end, "n": len(list(inputs))}


def random_events(seed, *, n=400, keys=5, span=5_000, disorder=800):
    """Out-of-order events: timestamps grow on average but jump back by up to ``disorder``."""
    rng = random.Random(seed)
    events, base = [], 0
    for _ in range(n):
        base += rng.randint(0, 2 * span // n)
        events.append({"k": f"k{rng.randrange(keys)}", "ts": max(0, base - rng.randint(0, disorder)), "n": 1})
    return events


def drive(op, events, *, delay):
    """One element at a time, each followed by the bounded-out-of-orderness watermark; then the end."""
    max_ts = -(2**62)
    watermarks = []
    for event in events:
        op.process_rows([event])
        max_ts = max(max_ts, event["ts"])
        watermarks.append(max_ts - delay - 1)
        op.process_watermark(watermarks[-1])
    op.process_watermark(MAX_WATERMARK)
    return watermarks


def model_event_time(events, watermarks, windows_of, lateness):
    """Expected firings of EventTimeTrigger panes, and the late elements, in plain Python.

    ``watermarks[i]`` follows ``events[i]``. A window fires once when the watermark
    reaches its last ms (if it has elements), and again for every element it accepts
    after that (within the allowed lateness).
    """
    contents = collections.defaultdict(int)
    fired = set()
    firings = []
    late = []
    watermark = -(2**63)
    for event, new_watermark in zip(events, watermarks, strict=True):
        taken = False
        for start, end in windows_of(event["ts"]):
            if end - 1 + lateness <= watermark:
                continue
            taken = True
            pane = (event["k"], start, end)
            contents[pane] += 1
            if end - 1 <= watermark:
                firings.append((*pane, contents[pane]))
        if not taken and event["ts"] + lateness <= watermark:
            late.append(event)
        for pane, count in contents.items():
            if pane not in fired and watermark < pane[2] - 1 <= new_watermark:
                fired.add(pane)
                firings.append((*pane, count))
        watermark = max(watermark, new_watermark)
    for pane, count in contents.items():
        if pane not in fired and pane[2] - 1 > watermark:
            firings.append((*pane, count))
    return collections.Counter(firings), late


def observed(rows):
    return collections.Counter((r["k"], r["start"], r["end"], r["n"]) for r in rows)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("lateness", [0, 500])
def test_tumbling_event_time_out_of_order_and_late_against_model(seed, lateness):
    events = random_events(seed, disorder=2000)
    op, out, late = make(tumbling(1000, lateness, window_function=KeyWindowCount()))
    watermarks = drive(op, events, delay=200)

    def windows_of(ts):
        start = ts - ts % 1000
        return [(start, start + 1000)]

    expected, expected_late = model_event_time(events, watermarks, windows_of, lateness)
    assert observed(out.rows) == expected
    assert late.rows == expected_late
    assert expected_late, "the data must contain late elements for this test to mean anything"
    if lateness:
        panes = {firing[:3] for firing in expected}
        assert sum(expected.values()) > len(panes), "some windows must fire again for late elements"
    assert out.watermarks[-1] == MAX_WATERMARK


@pytest.mark.parametrize("seed", [4, 5])
def test_sliding_event_time_against_model(seed):
    events = random_events(seed, n=250)
    assigner = SlidingEventTimeWindows.of(Time.milliseconds(1000), Time.milliseconds(250))
    descriptor = WindowOperatorDescriptor(
        assigner=assigner,
        trigger=assigner.get_default_trigger(None),
        allowed_lateness=100,
        late_data_tag=LATE,
        window_function=KeyWindowCount(),
    )
    op, out, late = make(descriptor)
    watermarks = drive(op, events, delay=300)

    def windows_of(ts):
        last = ts - ts % 250
        return [(s, s + 1000) for s in range(last, ts - 1000, -250)]

    expected, expected_late = model_event_time(events, watermarks, windows_of, 100)
    assert observed(out.rows) == expected
    assert late.rows == expected_late


def test_reduce_and_aggregate_give_the_same_sums_as_python():
    events = random_events(7, n=300)

    class Average(AggregateFunction):
        def create_accumulator(self):
            return (0, 0)

        def add(self, value, accumulator):
            return (accumulator[0] + value["ts"], accumulator[1] + 1)

        def get_result(self, accumulator):
            return {"sum": accumulator[0], "count": accumulator[1]}

        def merge(self, a, b):
            return (a[0] + b[0], a[1] + b[1])

    op_r, out_r, _ = make(tumbling(10_000, pane_kind=PaneKind.REDUCE, reduce_function=count_reduce), side=False)
    op_a, out_a, _ = make(tumbling(10_000, pane_kind=PaneKind.AGGREGATE, aggregate_function=Average()), side=False)
    for op in (op_r, op_a):
        op.process_rows(sorted(events, key=lambda e: e["ts"]))
        op.process_watermark(MAX_WATERMARK)
    expected = collections.Counter()
    sums = collections.Counter()
    for e in events:
        expected[(e["k"], e["ts"] // 10_000)] += 1
        sums[e["ts"] // 10_000] += e["ts"]
    assert sorted(r["n"] for r in out_r.rows) == sorted(expected.values())
    assert sum(r["sum"] for r in out_a.rows) == sum(sums.values())
    assert sorted(r["count"] for r in out_a.rows) == sorted(expected.values())


def sessions_model(events, gap):
    """Per key: sort timestamps, split where the next one is >= gap after the previous one."""
    by_key = collections.defaultdict(list)
    for e in events:
        by_key[e["k"]].append(e["ts"])
    result = collections.Counter()
    for key, stamps in by_key.items():
        stamps.sort()
        start = prev = stamps[0]
        count = 1
        for ts in stamps[1:]:
            if ts > prev + gap:  # windows [ts, ts+gap) touch when ts == prev + gap: they merge (Flink)
                result[(key, start, prev + gap, count)] += 1
                start, count = ts, 0
            prev = max(prev, ts)
            count += 1
        result[(key, start, prev + gap, count)] += 1
    return result


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_merging_session_windows_out_of_order_against_model(seed):
    rng = random.Random(seed)
    events = []
    for key in ("a", "b", "c"):
        t = 0
        for _ in range(60):
            t += rng.choice([50, 120, 300, 900, 2500])  # some gaps above 1000 start a new session
            events.append({"k": key, "ts": t, "n": 1})
    rng.shuffle(events)  # fully out of order: held back by a watermark that only comes at the end
    assigner = EventTimeSessionWindows.with_gap(Time.milliseconds(1000))
    descriptor = WindowOperatorDescriptor(
        assigner=assigner, trigger=assigner.get_default_trigger(None), window_function=KeyWindowCount()
    )
    op, out, _ = make(descriptor, side=False)
    for i in range(0, len(events), 17):
        op.process_rows(events[i : i + 17])
    assert out.rows == []
    op.process_watermark(MAX_WATERMARK)
    assert observed(out.rows) == sessions_model(events, 1000)


def test_session_merge_with_count_trigger_merges_trigger_state():
    """CountTrigger(3) on sessions: counts of merged windows add up (OnMergeContext.merge_partitioned_state)."""
    assigner = EventTimeSessionWindows.with_gap(Time.milliseconds(100))
    descriptor = WindowOperatorDescriptor(
        assigner=assigner, trigger=CountTrigger.of(3), window_function=KeyWindowCount()
    )
    op, out, _ = make(descriptor, side=False)
    op.process_rows([{"k": "a", "ts": 0, "n": 1}, {"k": "a", "ts": 500, "n": 1}])  # two sessions, 1 each
    assert out.rows == []
    op.process_rows([{"k": "a", "ts": 250, "n": 1}])  # bridges 0 and 500? no: gap 100, stays apart
    op.process_rows([{"k": "a", "ts": 60, "n": 1}])  # joins [0,100): count 2
    assert out.rows == []
    op.process_rows([{"k": "a", "ts": 150, "n": 1}])  # [0,160) + [150,250)+[250,350) merge: 2 + 1 + 1 = 4 >= 3
    assert [(r["start"], r["end"], r["n"]) for r in out.rows] == [(0, 350, 4)]


class Tracking(ProcessWindowFunction):
    """Counts firings per window (window_state) and per key (global_state); records clear calls."""

    def __init__(self):
        self.cleared = []

    def process(self, key, context, elements):
        firings = context.window_state().get_state(ValueStateDescriptor("firings"))
        total = context.global_state().get_state(ValueStateDescriptor("total"))
        firings.update((firings.value() or 0) + 1)
        total.update((total.value() or 0) + 1)
        window = context.window()
        yield {
            "k": key,
            "start": window.start,
            "n": len(elements),
            "firing": firings.value(),
            "total": total.value(),
            "watermark": context.current_watermark(),
        }

    def clear(self, context):
        context.window_state().get_state(ValueStateDescriptor("firings")).clear()
        self.cleared.append(context.window())


def test_process_window_function_context_state_and_clear_with_lateness():
    function = Tracking()
    op, out, late = make(tumbling(1000, 500, window_function=function))
    op.process_rows([{"k": "a", "ts": 100, "n": 1}, {"k": "a", "ts": 1100, "n": 1}])
    op.process_watermark(999)  # fires [0, 1000)
    op.process_rows([{"k": "a", "ts": 200, "n": 1}])  # late but within lateness: fires again at once
    op.process_watermark(1499)  # cleanup of [0, 1000): clear()
    op.process_rows([{"k": "a", "ts": 300, "n": 1}])  # too late: side output
    op.process_watermark(MAX_WATERMARK)
    assert [(r["start"], r["n"], r["firing"], r["total"]) for r in out.rows] == [
        (0, 1, 1, 1),
        (0, 2, 2, 2),
        (1000, 1, 1, 3),
    ]
    assert out.rows[0]["watermark"] == 999
    assert function.cleared == [TimeWindow(0, 1000), TimeWindow(1000, 2000)]
    assert late.rows == [{"k": "a", "ts": 300, "n": 1}]
    assert op.snapshot_state(1).keyed == [
        KeyedStateSnapshot(name="total", kind=StateKind.VALUE, entries=[(op_key_group("a"), "a", 3)])
    ]


def op_key_group(key):
    from flinklike_spark._runtime.state.key_groups import key_group_for

    return key_group_for(key, 128)


def test_late_elements_are_dropped_without_a_side_output():
    descriptor = tumbling(1000, late_data_tag=None, pane_kind=PaneKind.REDUCE, reduce_function=count_reduce)
    op, out, _ = make(descriptor, side=False)
    op.process_watermark(5000)
    op.process_rows([{"k": "a", "ts": 10, "n": 1}])
    op.process_watermark(MAX_WATERMARK)
    assert out.rows == []
    assert op.num_late_records_dropped == 1


def test_count_windows_tumbling_and_sliding_like_pyflink():
    rows = [{"k": k, "ts": 0, "n": i} for i in range(10) for k in ("a", "b")]

    class Ids(WindowFunction):
        def apply(self, key, window, inputs):
            yield {"k": key, "id": window.id, "ns": [r["n"] for r in inputs]}

    assigner = CountTumblingWindowAssigner.of(3)
    op, out, _ = make(
        WindowOperatorDescriptor(assigner=assigner, trigger=assigner.get_default_trigger(None), window_function=Ids()),
        side=False,
    )
    op.process_rows(rows)
    assert [(r["k"], r["id"], r["ns"]) for r in out.rows if r["k"] == "a"] == [
        ("a", 0, [0, 1, 2]),
        ("a", 1, [3, 4, 5]),
        ("a", 2, [6, 7, 8]),
    ]
    assigner = CountSlidingWindowAssigner.of(4, 2)
    op, out, _ = make(
        WindowOperatorDescriptor(assigner=assigner, trigger=assigner.get_default_trigger(None), window_function=Ids()),
        side=False,
    )
    op.process_rows(rows)
    expected = [list(range(s, s + 4)) for s in range(0, 7, 2)]  # full windows of 4, every 2 elements
    assert [r["ns"] for r in out.rows if r["k"] == "b"] == expected
    assert CountWindow(3).max_timestamp() == MAX_WATERMARK


def test_global_windows_with_purging_count_trigger_and_window_all():
    class Sum(ProcessAllWindowFunction):
        def process(self, context, elements):
            yield {"sum": sum(e["n"] for e in elements)}

    assigner = GlobalWindows.create()
    op, out, _ = make(WindowOperatorDescriptor(
        assigner=assigner, trigger=PurgingTrigger.of(CountTrigger.of(4)), window_function=Sum()),
        side=False, key_field=None)  # fmt: skip
    op.process_rows([{"k": "x", "ts": 0, "n": i} for i in range(10)])
    op.process_watermark(MAX_WATERMARK)
    assert out.rows == [{"sum": 0 + 1 + 2 + 3}, {"sum": 4 + 5 + 6 + 7}]  # 8, 9 never fire (NeverTrigger semantics)


def test_continuous_event_time_trigger_fires_early_then_at_the_end():
    assigner = TumblingEventTimeWindows.of(Time.seconds(10))
    op, out, _ = make(WindowOperatorDescriptor(
        assigner=assigner, trigger=ContinuousEventTimeTrigger.of(Time.seconds(2)),
        window_function=KeyWindowCount()), side=False)  # fmt: skip
    op.process_rows([{"k": "a", "ts": 500, "n": 1}])
    op.process_watermark(1999)  # the first continuous fire time is 2000
    assert out.rows == []
    op.process_watermark(2000)
    op.process_rows([{"k": "a", "ts": 3000, "n": 1}])
    op.process_watermark(4000)
    op.process_watermark(MAX_WATERMARK)
    # at 2000 (1 element), 4000, 6000, 8000, and 9999: the window's end and the last continuous
    # fire time coincide, and timers are unique per (time, key, window), so it fires once
    assert [r["n"] for r in out.rows] == [1, 2, 2, 2, 2]


def test_processing_time_windows_fire_on_the_clock():
    clock = ManualClock()
    clock.now = 1_000
    assigner = TumblingProcessingTimeWindows.of(Time.seconds(1))
    op, out, _ = make(WindowOperatorDescriptor(
        assigner=assigner, trigger=assigner.get_default_trigger(None),
        pane_kind=PaneKind.REDUCE, reduce_function=count_reduce), clock=clock, side=False)  # fmt: skip
    op.process_rows([{"k": "a", "ts": 0, "n": 1}, {"k": "a", "ts": 0, "n": 1}])
    assert op.next_processing_timer() == 1_999
    clock.now = 2_100
    op.process_rows([{"k": "a", "ts": 0, "n": 1}])
    op.on_processing_time(2_100)
    assert [r["n"] for r in out.rows] == [2]
    op.on_processing_time(3_000)
    assert [r["n"] for r in out.rows] == [2, 1]
    assert op.next_processing_timer() is None, "fired windows are cleaned up"


def test_processing_time_sessions_merge():
    clock = ManualClock()
    assigner = ProcessingTimeSessionWindows.with_gap(Time.milliseconds(100))
    op, out, _ = make(WindowOperatorDescriptor(
        assigner=assigner, trigger=assigner.get_default_trigger(None), window_function=KeyWindowCount()),
        clock=clock, side=False)  # fmt: skip
    for now in (0, 50, 120, 400):
        clock.now = now
        op.on_processing_time(now)
        op.process_rows([{"k": "a", "ts": 0, "n": 1}])
    op.on_processing_time(10_000)
    assert sorted((r["start"], r["end"], r["n"]) for r in out.rows) == [(0, 220, 3), (400, 500, 1)]


def split_snapshot(snapshot, parallelism):
    """Per new subtask, the RestoredState the restore path would give it (pickled like storage)."""
    restored = []
    for subtask in range(parallelism):
        groups = key_group_range(128, parallelism, subtask)
        entries = tuple(
            RestoredEntry(
                state_name=name,
                state_kind=kind,
                key_group=group,
                key=pickle.loads(pickle.dumps(key)),
                value=pickle.loads(pickle.dumps(value)),
                subtask=0,
            )  # fmt: skip
            for name, kind, rows in ((s.name, s.kind, s.entries) for s in snapshot.keyed)
            for group, key, value in rows
            if group in groups
        )
        restored.append(RestoredState(checkpoint_id=1, keyed=entries))
    return restored


@pytest.mark.parametrize("new_parallelism", [1, 3])
@pytest.mark.parametrize("kind", ["tumbling", "sessions"])
def test_snapshot_restore_and_rescale_give_the_uninterrupted_output(kind, new_parallelism):
    events = random_events(21, n=300, keys=7)

    def descriptor():
        if kind == "tumbling":
            return tumbling(1000, 300, window_function=KeyWindowCount())
        assigner = EventTimeSessionWindows.with_gap(Time.milliseconds(150))
        return WindowOperatorDescriptor(assigner=assigner, trigger=CountTrigger.of(4), late_data_tag=LATE,
                                        window_function=KeyWindowCount())  # fmt: skip

    op, whole, whole_late = make(descriptor())
    drive(op, events, delay=100)

    first, second = events[:140], events[140:]
    op, out, late = make(descriptor())
    max_ts = -(2**62)
    for event in first:
        op.process_rows([event])
        max_ts = max(max_ts, event["ts"])
        op.process_watermark(max_ts - 101)
    snapshot = op.snapshot_state(1)
    restored_ops = []
    for subtask, restored in enumerate(split_snapshot(snapshot, new_parallelism)):
        restored_ops.append(make(descriptor(), restored=restored, subtask=subtask, parallelism=new_parallelism))
    from flinklike_spark._runtime.state.key_groups import key_group_for, operator_index_for_key_group

    # Watermarks are not part of a checkpoint (as in Flink): the restored operators get the
    # current one before any element, as the uninterrupted operator had it.
    for restored_op, _, _ in restored_ops:
        restored_op.process_watermark(max_ts - 101)
    for event in second:
        owner = operator_index_for_key_group(128, new_parallelism, key_group_for(event["k"], 128))
        restored_ops[owner][0].process_rows([event])
        max_ts = max(max_ts, event["ts"])
        for restored_op, _, _ in restored_ops:
            restored_op.process_watermark(max_ts - 101)
    for restored_op, _, _ in restored_ops:
        restored_op.process_watermark(MAX_WATERMARK)
    resumed = out.rows + [row for _, o, _ in restored_ops for row in o.rows]
    resumed_late = late.rows + [row for _, _, lt in restored_ops for row in lt.rows]
    assert observed(resumed) == observed(whole.rows)
    assert sorted(map(repr, resumed_late)) == sorted(map(repr, whole_late.rows))


def test_invalid_configurations_are_named():
    with pytest.raises(ConfigurationError, match="abs\\(offset\\)"):
        TumblingEventTimeWindows.of(Time.seconds(1), Time.seconds(2))
    with pytest.raises(ConfigurationError, match="gap must be positive"):
        EventTimeSessionWindows.with_gap(Time.milliseconds(0))
    with pytest.raises(ConfigurationError, match="positive int"):
        CountTrigger.of(0)
    with pytest.raises(ConfigurationError, match="allowed_lateness"):
        tumbling(1000, -1)


def test_windows_and_time():
    assert Time.minutes(2).to_milliseconds() == 120_000
    assert TimeWindow(0, 10).max_timestamp() == 9
    assert TimeWindow.get_window_start_with_offset(1234, 0, 1000) == 1000
    assert TimeWindow.get_window_start_with_offset(-1, 0, 1000) == -1000
    assert TimeWindow(0, 10).intersects(TimeWindow(10, 20))
    assert TimeWindow(0, 10).cover(TimeWindow(5, 30)) == TimeWindow(0, 30)
    windows = SlidingEventTimeWindows.of(Time.seconds(10), Time.seconds(5)).assign_windows(None, 7000, None)
    assert sorted(windows) == [TimeWindow(0, 10_000), TimeWindow(5000, 15_000)]


def test_window_results_carry_the_window_max_timestamp_and_late_data_its_own():
    op, out, late = make(tumbling(1000, pane_kind=PaneKind.REDUCE, reduce_function=count_reduce))
    op.process_rows([{"k": "a", "ts": 1500, "n": 1}, {"k": "b", "ts": 200, "n": 1}])
    op.process_watermark(2500)
    op.process_rows([{"k": "a", "ts": 700, "n": 1}])  # late
    assert sorted(zip((r["k"] for r in out.rows), out.timestamps)) == [("a", 1999), ("b", 999)]
    assert late.rows == [{"k": "a", "ts": 700, "n": 1}] and late.timestamps == [700]
