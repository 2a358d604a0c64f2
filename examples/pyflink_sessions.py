"""A PyFlink program that runs here with only its imports changed.

Written exactly as for PyFlink 2.x (``from pyflink.common ...``, ``from pyflink.datastream ...``);
replacing the ``pyflink`` prefix of each import with ``flinklike_spark`` is the only change. It
counts each user's clicks per event-time session (10 s gap) with a ProcessWindowFunction, keeps a
per-user running total of sessions in keyed state with a KeyedProcessFunction, and prints both.

    python3 examples/pyflink_sessions.py
"""

from collections.abc import Iterable

from flinklike_spark.common import Duration, Types, WatermarkStrategy
from flinklike_spark.common.watermark_strategy import TimestampAssigner
from flinklike_spark.datastream import KeyedProcessFunction, RuntimeContext, StreamExecutionEnvironment
from flinklike_spark.datastream.functions import ProcessWindowFunction
from flinklike_spark.datastream.state import ValueStateDescriptor
from flinklike_spark.datastream.window import EventTimeSessionWindows, TimeWindow

CLICKS = [  # (user, page, event time in ms)
    ("alice", "home", 1_000), ("bob", "home", 2_000), ("alice", "cart", 4_000), ("alice", "pay", 9_000),
    ("bob", "search", 30_000), ("alice", "home", 40_000), ("bob", "cart", 31_000), ("alice", "help", 45_000),
]  # fmt: skip


class ClickTime(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp) -> int:
        return value[2]


class CountSession(ProcessWindowFunction[tuple, tuple, str, TimeWindow]):
    def process(self, key: str, context: ProcessWindowFunction.Context[TimeWindow], elements: Iterable[tuple]):
        yield key, context.window().start, context.window().end, len(list(elements))


class SessionsSoFar(KeyedProcessFunction):
    def open(self, runtime_context: RuntimeContext):
        self.sessions = runtime_context.get_state(ValueStateDescriptor("sessions", Types.INT()))

    def process_element(self, value, ctx: "KeyedProcessFunction.Context"):
        total = (self.sessions.value() or 0) + 1
        self.sessions.update(total)
        yield value[0], value[3], total


def main() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    clicks = env.from_collection(CLICKS, type_info=Types.TUPLE([Types.STRING(), Types.STRING(), Types.LONG()]))
    sessions = (
        clicks.assign_timestamps_and_watermarks(
            WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_seconds(5)).with_timestamp_assigner(ClickTime())
        )
        .key_by(lambda click: click[0], key_type=Types.STRING())
        .window(EventTimeSessionWindows.with_gap(Duration.of_seconds(10)))
        .process(CountSession(), Types.TUPLE([Types.STRING(), Types.LONG(), Types.LONG(), Types.INT()]))
    )
    sessions.key_by(lambda session: session[0]).process(SessionsSoFar()).print()
    env.execute("pyflink sessions")


if __name__ == "__main__":
    main()
