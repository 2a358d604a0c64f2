"""connect / ConnectedStreams and broadcast state end to end, against plain Python, and across resumes."""

from __future__ import annotations

import collections
import time

import pytest

from checkpointing import list_completed_checkpoints
from connectors import CollectSink, SequenceSource
from flinklike_spark import MapStateDescriptor, StreamExecutionEnvironment, ValueStateDescriptor
from flinklike_spark.datastream.functions import (
    BroadcastProcessFunction,
    CoFlatMapFunction,
    CoMapFunction,
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
)
from flinklike_spark.datastream.output_tag import OutputTag
from flinklike_spark.errors import IncompatibleCheckpointError, JobCancelledError
from tests.support.checkpoint_jobs import MODES, checkpoint_config, run_and_cancel

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

END_OF_TIME = 2**62
RULES = MapStateDescriptor("rules")


class Tag(CoMapFunction):
    def map1(self, value):
        return {"side": "numbers", "v": value["x"]}

    def map2(self, value):
        return {"side": "words", "v": len(value["w"])}


class Split(CoFlatMapFunction):
    def flat_map1(self, value):
        yield {"v": value["x"]}
        yield {"v": -value["x"]}

    def flat_map2(self, value):
        return [{"v": ord(c)} for c in value["w"]]


class Threshold(BroadcastProcessFunction):
    """Numbers above the broadcast threshold; the broadcast side arrives first (bounded, one row)."""

    def process_element(self, value, ctx):
        rules = ctx.get_broadcast_state(RULES)
        if value["x"] >= (rules.get("min") or 0):
            yield {"x": value["x"], "seen_rule": rules.contains("min")}

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(RULES).put("min", value["min"])


def test_co_map_co_flat_map_and_broadcast_against_python():
    env = StreamExecutionEnvironment.get_execution_environment({"parallelism.default": 2})
    numbers = env.from_collection([{"x": i} for i in range(20)])
    words = env.from_collection([{"w": w} for w in ["a", "bb", "ccc"]])
    numbers.connect(words).map(Tag()).sink_to(CollectSink("tagged"))
    numbers.connect(words).flat_map(Split()).sink_to(CollectSink("split"))
    result = env.execute("connect")
    tagged = CollectSink.rows(result, name="tagged")
    assert sorted((r["side"], r["v"]) for r in tagged) == sorted(
        [("numbers", i) for i in range(20)] + [("words", n) for n in (1, 2, 3)]
    )
    split = sorted(r["v"] for r in CollectSink.rows(result, name="split"))
    assert split == sorted([i for i in range(20)] + [-i for i in range(20)] + [ord(c) for c in "abbccc"])


class PairCounts(KeyedCoProcessFunction):
    """Per key: counts of both inputs, checking each input's seqs arrive exactly once and in order."""

    def open(self, runtime_context):
        self.next1 = runtime_context.get_state(ValueStateDescriptor("next1"))
        self.next2 = runtime_context.get_state(ValueStateDescriptor("next2"))

    def _count(self, state, value, ctx):
        expected = state.value() or 0
        if value["seq"] != expected:
            raise AssertionError(f"key {value['key']}: seq {value['seq']}, expected {expected}")
        if (self.next1.value() or 0) + (self.next2.value() or 0) == 0:
            ctx.timer_service().register_event_time_timer(END_OF_TIME)
        state.update(expected + 1)

    def process_element1(self, value, ctx):
        self._count(self.next1, value, ctx)

    def process_element2(self, value, ctx):
        self._count(self.next2, value, ctx)
        if value["seq"] == 0:
            ctx.output(OutputTag("firsts"), {"key": value["key"]})

    def on_timer(self, timestamp, ctx):
        yield {"key": ctx.get_current_key(), "n1": self.next1.value(), "n2": self.next2.value()}


class ScaledCount(KeyedBroadcastProcessFunction):
    """Counts per key; at the end multiplies by the sum of all broadcast factors (order-independent)."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        if self.count.value() is None:
            ctx.timer_service().register_event_time_timer(END_OF_TIME)
        self.count.update((self.count.value() or 0) + 1)

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(RULES).put(value["seq"], 1)

    def on_timer(self, timestamp, ctx):
        factors = sum(v for _, v in ctx.get_broadcast_state(RULES).items())
        yield {"key": ctx.get_current_key(), "scaled": self.count.value() * factors}


NUM_KEYS, RECORDS_PER_KEY, FACTORS = 6, 1_500, 40


def build(config: dict, *, rate: float | None) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment(config)
    one = env.from_source(SequenceSource(num_keys=NUM_KEYS, records_per_key=RECORDS_PER_KEY, rows_per_second=rate),
                          name="one").uid("one")  # fmt: skip
    two = env.from_source(SequenceSource(num_keys=NUM_KEYS, records_per_key=RECORDS_PER_KEY, rows_per_second=rate),
                          name="two").uid("two")  # fmt: skip
    pairs = one.key_by("key").connect(two.key_by("key")).process(PairCounts()).uid("pairs")
    pairs.sink_to(CollectSink("pairs"))
    pairs.get_side_output(OutputTag("firsts")).sink_to(CollectSink("firsts"))
    # throttled too when the job is to be stopped, and one subtask (a second would have no key and
    # finish at once): checkpoints are only triggered while every source task runs
    factor_rate = None if rate is None else 8
    factors = env.from_source(SequenceSource(num_keys=1, records_per_key=FACTORS, rows_per_second=factor_rate),
                              name="factors").uid("factors").set_parallelism(1)  # fmt: skip
    (
        one.key_by("key")
        .connect(factors.broadcast(RULES))
        .process(ScaledCount())
        .uid("scaled")
        .sink_to(CollectSink("scaled"))
    )
    return env


def check(result, *, firsts: bool = True) -> None:
    pairs = {r["key"]: (r["n1"], r["n2"]) for r in CollectSink.rows(result, name="pairs")}
    assert pairs == {k: (RECORDS_PER_KEY, RECORDS_PER_KEY) for k in range(NUM_KEYS)}
    scaled = {r["key"]: r["scaled"] for r in CollectSink.rows(result, name="scaled")}
    assert scaled == {k: RECORDS_PER_KEY * FACTORS for k in range(NUM_KEYS)}
    if firsts:
        assert collections.Counter(r["key"] for r in CollectSink.rows(result, name="firsts")) == {
            k: 1 for k in range(NUM_KEYS)
        }


def test_keyed_connect_and_keyed_broadcast_against_python():
    check(build({"parallelism.default": 2, "local.number-taskmanager": 2}, rate=None).execute("connect"))


@pytest.mark.parametrize("mode", MODES)
def test_connect_and_broadcast_resume_from_checkpoints_exactly_once(tmp_path, mode):
    directory = str(tmp_path / "checkpoints")
    run_and_cancel(build(checkpoint_config(directory, mode), rate=1_000), directory, checkpoints=3)
    resumed = build(checkpoint_config(directory, mode) | {"execution.state-recovery.path": directory}, rate=None)
    check(resumed.execute("resumed"), firsts=False)  # the side outputs before the stop went with the first job


def test_broadcast_state_is_read_only_on_the_element_side():
    env = StreamExecutionEnvironment.get_execution_environment({"parallelism.default": 2})
    rules = env.from_collection([{"min": 5}])
    numbers = env.from_collection([{"x": i} for i in range(10)])
    numbers.connect(rules.broadcast(RULES)).process(Threshold()).sink_to(CollectSink("kept"))
    kept = CollectSink.rows(env.execute("broadcast"))
    # the two inputs race: numbers before the rule pass with the default threshold 0
    assert {r["x"] for r in kept if r["seen_rule"]} <= set(range(5, 10))
    assert {r["x"] for r in kept} >= set(range(5, 10))


def stop_after_in_flight_checkpoint(directory: str) -> str:
    """Run the job with unaligned checkpoints until one holds in-flight data; its ``chk-<N>`` path."""
    config = checkpoint_config(directory, "unaligned") | {"execution.checkpointing.num-retained": 100}
    client = build(config, rate=1_000).execute_async("in flight")
    deadline = time.monotonic() + 120
    try:
        while not (with_data := [c for c in list_completed_checkpoints(directory, client.job_id)
                                 if c.channel_state_bytes > 0]):  # fmt: skip
            assert not client.done(), "the job ended before it checkpointed in-flight data"
            assert time.monotonic() < deadline, "no unaligned checkpoint with in-flight data within 120 s"
            time.sleep(0.05)
    finally:
        client.cancel()
        with pytest.raises(JobCancelledError):
            client.wait(60)
    return f"{directory}/{client.job_id}/chk-{with_data[0].checkpoint_id}"


def test_connect_and_broadcast_resume_unaligned_at_a_higher_parallelism(tmp_path):
    """In-flight rows of a keyed connect go to the subtask owning their key group; a restored subtask
    replays the in-flight broadcast rows of the old subtask whose broadcast state it restores."""
    directory = str(tmp_path / "checkpoints")
    path = stop_after_in_flight_checkpoint(directory)
    config = checkpoint_config(directory, "unaligned", 3) | {
        "execution.state-recovery.path": path,
        "restart-strategy.type": "none",  # a misrouted record fails PairCounts: fail at once, not restart
    }
    check(build(config, rate=None).execute("rescaled"), firsts=False)


def test_in_flight_data_of_differently_chained_tasks_is_refused(tmp_path):
    """At parallelism 1 the broadcast source (parallelism 1) chains with its wrapper: the recorded
    in-flight data's task and channel indexes name other edges, so the restore is refused."""
    directory = str(tmp_path / "checkpoints")
    path = stop_after_in_flight_checkpoint(directory)
    config = checkpoint_config(directory, "unaligned", 1) | {"execution.state-recovery.path": path}
    with pytest.raises(IncompatibleCheckpointError, match=r"holds \d+ bytes of in-flight data .* chained"):
        build(config, rate=None).execute("rechained")
