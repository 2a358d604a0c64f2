"""Keyed count: the main example, on the embedded local cluster.

SequenceSource -> key_by("key") -> KeyedProcessFunction counting with ValueState.
Each key's final count is emitted by an event-time timer that fires when the
bounded source ends (its final watermark), exactly as in Flink.

Run:  python examples/keyed_count.py   (or: flinklike run examples/keyed_count.py)
"""

from __future__ import annotations

import sys

from connectors import CollectSink, SequenceSource
from flinklike_spark import KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor

NUM_KEYS = 100
RECORDS_PER_KEY = 10_000


class CountPerKey(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        current = self.count.value() or 0
        if current == 0:
            # One timer per key at the end of time: fires on the final watermark.
            ctx.timer_service().register_event_time_timer(2**62)
        self.count.update(current + 1)
        return None

    def on_timer(self, timestamp, ctx):
        yield {"key": ctx.get_current_key(), "count": self.count.value()}


def build(env: StreamExecutionEnvironment, sink: CollectSink) -> None:
    source = SequenceSource(num_keys=NUM_KEYS, records_per_key=RECORDS_PER_KEY)
    (
        env.from_source(source, name="sequence")
        .key_by("key")
        .process(CountPerKey())
        .uid("count-per-key")
        .name("CountPerKey")
        .sink_to(sink)
    )


def main() -> int:
    env = StreamExecutionEnvironment.get_execution_environment(
        {"parallelism.default": 2, "local.number-taskmanager": 2}
    )
    sink = CollectSink("counts")
    build(env, sink)
    result = env.execute("keyed count")
    counts = {row["key"]: row["count"] for row in CollectSink.rows(result)}
    wrong = {k: c for k, c in counts.items() if c != RECORDS_PER_KEY}
    total = NUM_KEYS * RECORDS_PER_KEY
    seconds = result.net_runtime.total_seconds()
    print(f"counted {total:,} records over {len(counts)} keys in {seconds:.2f} s ({total / seconds:,.0f} records/s)")
    if len(counts) != NUM_KEYS or wrong:
        print(f"WRONG: {len(counts)} keys, wrong counts {dict(list(wrong.items())[:5])}", file=sys.stderr)
        return 1
    print(f"every key counted exactly {RECORDS_PER_KEY:,} records")
    return 0


if __name__ == "__main__":
    sys.exit(main())
