"""Jobs of the State Processor API tests: a keyed count over a collection, and one holding every state kind."""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

from connectors import CollectSink
from flinklike_spark import KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor
from flinklike_spark.datastream.functions import AggregateFunction
from flinklike_spark.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateTtlConfig,
)

__all__ = [
    "END_OF_TIME",
    "AllKinds",
    "Count",
    "MeanOfSeq",
    "all_kinds_descriptors",
    "counts_per_key",
    "run_count_job",
]

END_OF_TIME = 2**62


class Count(KeyedProcessFunction):
    """Counts events per key in ValueState ``count``; emits ``{key, count}`` for every event."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield {"key": value["key"], "count": count}


def run_count_job(config: dict, events: list[dict], *, function=None, source_uid: str = "events") -> list[dict]:
    """Run ``events`` through ``function`` (default :class:`Count`) with uid ``count``; the collected rows."""
    env = StreamExecutionEnvironment.get_execution_environment(config)
    (
        env.from_collection(events).uid(source_uid)
        .key_by("key").process(function or Count()).uid("count")
        .sink_to(CollectSink("counts"))
    )  # fmt: skip
    return CollectSink.rows(env.execute("count"))


def counts_per_key(rows: list[dict]) -> dict[object, list[int]]:
    """Per key, the emitted counts in emission order."""
    out: dict[object, list[int]] = defaultdict(list)
    for row in rows:
        out[row["key"]].append(row["count"])
    return dict(out)


class MeanOfSeq(AggregateFunction):
    """Accumulator ``(sum, count)`` of ``seq``; result the mean."""

    def create_accumulator(self):
        return (0, 0)

    def add(self, value, accumulator):
        return (accumulator[0] + value, accumulator[1] + 1)

    def get_result(self, accumulator):
        return accumulator[0] / accumulator[1]

    def merge(self, a, b):
        return (a[0] + b[0], a[1] + b[1])


def all_kinds_descriptors() -> dict:
    """The descriptors :class:`AllKinds` registers, by state name."""
    seen = ValueStateDescriptor("last_seen")
    seen.enable_time_to_live(StateTtlConfig.new_builder(timedelta(hours=1)).build())
    return {
        "count": ValueStateDescriptor("count"),
        "recent": ListStateDescriptor("recent"),
        "by_parity": MapStateDescriptor("by_parity"),
        "seq_sum": ReducingStateDescriptor("seq_sum", lambda a, b: a + b),
        "mean": AggregatingStateDescriptor("mean", MeanOfSeq()),
        "last_seen": seen,
    }


class AllKinds(KeyedProcessFunction):
    """Per key (rows ``{key, seq}`` with seq 0, 1, 2, ... per key): every keyed state kind, and a timer.

    After n events of a key: ``count`` = n, ``recent`` = the last 3 seqs, ``by_parity`` =
    {"even"/"odd": last seq of that parity}, ``seq_sum`` = n(n-1)/2, ``mean`` accumulator =
    (n(n-1)/2, n), ``last_seen`` (TTL) = n - 1, and one event-time timer at END_OF_TIME.
    Raises on a seq out of order (a lost or duplicated event).
    """

    def open(self, runtime_context):
        d = all_kinds_descriptors()
        self.count = runtime_context.get_state(d["count"])
        self.recent = runtime_context.get_list_state(d["recent"])
        self.by_parity = runtime_context.get_map_state(d["by_parity"])
        self.seq_sum = runtime_context.get_reducing_state(d["seq_sum"])
        self.mean = runtime_context.get_aggregating_state(d["mean"])
        self.last_seen = runtime_context.get_state(d["last_seen"])

    def process_element(self, value, ctx):
        seq = value["seq"]
        count = self.count.value() or 0
        if seq != count:
            raise AssertionError(f"key {value['key']}: seq {seq} after {count} events")
        if count == 0:
            ctx.timer_service().register_event_time_timer(END_OF_TIME)
        self.count.update(count + 1)
        self.recent.update((self.recent.get() + [seq])[-3:])
        self.by_parity.put("even" if seq % 2 == 0 else "odd", seq)
        self.seq_sum.add(seq)
        self.mean.add(seq)
        self.last_seen.update(seq)
        return None

    def on_timer(self, timestamp, ctx):
        yield {"key": ctx.get_current_key(), "count": self.count.value()}
