"""The State Processor API against real jobs: bootstrap, read, edit and migrate keyed state.

Every savepoint written here is resumed by a real job (2 TaskExecutor processes)
through ``execution.state-recovery.path``, and the job's output is checked per
key: nothing lost, duplicated or out of order. The Spark tests (1M keys from a
Delta table, deleting keys with SQL) run on a local Spark session with Delta.
"""

from __future__ import annotations

import random
import time
from collections import Counter

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from checkpointing import list_completed_checkpoints
from connectors import CollectSink, SequenceSource
from flinklike_spark import KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor
from flinklike_spark.errors import CheckpointNotFoundError, StateLossError, StateNotFoundError, StateProcessorError
from flinklike_spark.state_processor import (
    KeyedStateBootstrapFunction,
    OperatorIdentifier,
    OperatorTransformation,
    SavepointReader,
    SavepointWriter,
)
from tests.support.checkpoint_jobs import checkpoint_config, run_and_cancel
from tests.support.exact_count_job import NUM_KEYS, RECORDS_PER_KEY, build
from tests.support.state_processor_jobs import (
    END_OF_TIME,
    AllKinds,
    all_kinds_descriptors,
    counts_per_key,
    run_count_job,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

CONFIG = {"parallelism.default": 2, "local.number-taskmanager": 2}


def _events(num: int, keys: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    return [{"key": rng.randrange(keys), "amount": rng.randrange(100)} for _ in range(num)]


class CountBootstrap(KeyedStateBootstrapFunction):
    """Bootstraps ``count`` as the job's Count would have left it: one increment per historical event."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)


@pytest.mark.parametrize("form", ["columns", "function"])
def test_bootstrapped_state_gives_the_result_of_replaying_the_whole_history(tmp_path, form):
    history = _events(4000, 500, seed=1)
    new = _events(1500, 650, seed=2)  # keys 500..649 have no history
    replayed = counts_per_key(run_count_job(CONFIG, history + new))

    if form == "columns":
        counts = Counter(e["key"] for e in history)
        data = pa.table({"key": list(counts), "count": list(counts.values())})
        transformation = OperatorTransformation.bootstrap_with(data).key_by("key").states("count")
    else:
        transformation = OperatorTransformation.bootstrap_with(history).key_by("key").transform(CountBootstrap())
    path = (
        SavepointWriter.new_savepoint()
        .with_operator(OperatorIdentifier.for_uid("count"), transformation)
        .write(str(tmp_path / "savepoints"))
    )
    # resumed at another parallelism than the savepoint was written with
    config = CONFIG | {"parallelism.default": 3, "execution.state-recovery.path": path}
    resumed = counts_per_key(run_count_job(config, new))

    history_counts = Counter(e["key"] for e in history)
    assert set(resumed) == {e["key"] for e in new}
    for key, emitted in resumed.items():
        assert emitted == replayed[key][history_counts[key] :], f"key {key}"


def _run_all_kinds(directory: str, config: dict) -> str:
    """Run AllKinds on an unbounded sequence until a few thousand events were counted; stop with a savepoint."""
    env = StreamExecutionEnvironment.get_execution_environment(
        CONFIG | config | {"execution.checkpointing.dir": directory}
    )
    (
        env.from_source(SequenceSource(num_keys=40, records_per_key=None, rows_per_second=4000), name="seq").uid("seq")
        .key_by("key").process(AllKinds()).uid("kinds")
        .sink_to(CollectSink("out"))
    )  # fmt: skip
    client = env.execute_async("all kinds")
    deadline = time.monotonic() + 60
    while len([m for m in client.task_metrics().values() if m]) < 2:
        assert time.monotonic() < deadline, "tasks did not start"
        time.sleep(0.1)
    time.sleep(1.5)
    savepoint = client.stop_with_savepoint(timeout=120)
    with pytest.raises(Exception):  # noqa: B017, PT011 - stopped: wait() raises JobCancelledError
        client.wait(60)
    return savepoint.path


@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_reader_decodes_every_keyed_state_kind_and_timers(tmp_path, backend):
    if backend == "rocksdb":
        pytest.importorskip("rocksdict")
    started = time.time()
    path = _run_all_kinds(str(tmp_path / "cp"), {"state.backend.type": backend})
    reader = SavepointReader.read(path)
    assert reader.operator_uids() == ["kinds", "seq"]
    state = reader.read_keyed_state("kinds")
    assert set(state.column_names) == {
        "key", "count", "recent", "by_parity", "seq_sum", "mean", "last_seen", "last_seen_ttl_timestamp", "key_group"
    }  # fmt: skip
    rows = state.to_pylist()
    assert len(rows) == 40 and sum(r["count"] for r in rows) > 100
    for row in rows:
        n = row["count"]
        assert row["recent"] == list(range(max(0, n - 3), n)), row
        parity = dict(row["by_parity"])
        assert parity[("even" if (n - 1) % 2 == 0 else "odd")] == n - 1, row
        assert row["seq_sum"] == n * (n - 1) // 2, row
        assert list(row["mean"]) == [n * (n - 1) // 2, n], row
        assert row["last_seen"] == n - 1, row
        assert started - 1 <= row["last_seen_ttl_timestamp"].timestamp() <= time.time() + 1, row
    timers = reader.read_timers("kinds").to_pylist()
    assert sorted(t["key"] for t in timers) == list(range(40))
    assert {(t["timestamp"], t["time_domain"]) for t in timers} == {(END_OF_TIME, "event_time")}
    assert reader.read_keyed_state("kinds", "count").column_names == ["key", "count", "key_group"]
    with pytest.raises(StateNotFoundError, match="'nope'.*'by_parity'"):
        reader.read_keyed_state("kinds", "nope")
    with pytest.raises(StateNotFoundError, match="'missing'.*'kinds'"):
        reader.read_keyed_state("missing")


def test_round_trip_of_every_kind_resumes_the_job_exactly(tmp_path):
    """Read every state, write it back as a new savepoint (TTL timestamps kept), resume: the job's
    per-key sequence checks pass and the timers fire with the full counts."""
    path = _run_all_kinds(str(tmp_path / "cp"), {})
    reader = SavepointReader.read(path)
    state = reader.read_keyed_state("kinds")
    transformation = (
        OperatorTransformation.bootstrap_with(state).key_by("key").states(*all_kinds_descriptors().values())
    )
    written = (
        SavepointWriter.from_existing_savepoint(path)
        .remove_operator("seq")
        .with_operator("kinds", transformation)
        .write(str(tmp_path / "sp"))
    )
    copy = SavepointReader.read(written)
    assert copy.read_keyed_state("kinds").equals(state)
    assert copy.read_timers("kinds").num_rows == 0  # with_operator replaced the keyed state: no timers
    counts = {r["key"]: r["count"] for r in state.to_pylist()}
    # resume with a bounded source of the next 5 seqs of every key; the job checks the sequence
    events = [{"key": k, "seq": counts[k] + i} for i in range(5) for k in sorted(counts)]
    env = StreamExecutionEnvironment.get_execution_environment(CONFIG | {"execution.state-recovery.path": written})

    class Emit(AllKinds):
        def process_element(self, value, ctx):
            super().process_element(value, ctx)
            yield {"key": value["key"], "count": self.count.value(), "sum": self.seq_sum.get()}

    env.from_collection(events).uid("next").key_by("key").process(Emit()).uid("kinds").sink_to(CollectSink("o"))
    out = CollectSink.rows(env.execute("resumed"))
    final = {r["key"]: r for r in out}
    for key, n in counts.items():
        assert final[key]["count"] == n + 5
        assert final[key]["sum"] == (n + 5) * (n + 4) // 2


class CountV2(KeyedProcessFunction):
    """Version 2 of the count job: the state is a dict {"n": count, "amount": total amount}."""

    def open(self, runtime_context):
        self.stats = runtime_context.get_state(ValueStateDescriptor("stats"))

    def process_element(self, value, ctx):
        stats = self.stats.value() or {"n": 0, "amount": 0}
        stats = {"n": stats["n"] + 1, "amount": stats["amount"] + value["amount"]}
        self.stats.update(stats)
        yield {"key": value["key"], "count": stats["n"], "amount": stats["amount"]}


def test_migrate_a_state_value_to_a_new_shape_between_job_versions(tmp_path):
    history = _events(3000, 300, seed=3)
    directory = str(tmp_path / "cp")
    # version 1 over the history; its state as a savepoint would hold it (the column form of that count)
    counted = {k: v[-1] for k, v in counts_per_key(run_count_job(CONFIG, history)).items()}
    v1_path = SavepointWriter.new_savepoint().with_operator("count", OperatorTransformation.bootstrap_with(
        pa.table({"key": list(counted), "count": list(counted.values())})).key_by("key").states("count")
    ).write(directory)  # fmt: skip

    # migrate: count (int) -> stats {"n", "amount"}, the amount computed from the history table
    old = SavepointReader.read(v1_path).read_keyed_state("count")
    amounts = Counter()
    for e in history:
        amounts[e["key"]] += e["amount"]
    migrated = pa.table({
        "key": old["key"],
        "stats": pa.array([{"n": n, "amount": amounts[k]} for k, n in zip(old["key"].to_pylist(), old["count"].to_pylist())]),
    })  # fmt: skip
    v2_path = (
        SavepointWriter.from_existing_savepoint(v1_path)
        .with_operator("count", OperatorTransformation.bootstrap_with(migrated).key_by("key").states("stats"))
        .drop_state("count", "count")  # version 2 keeps it in stats
        .write(directory)
    )
    assert SavepointReader.read(v1_path).read_keyed_state("count").equals(old), "the source savepoint changed"

    new = _events(800, 300, seed=4)
    env = StreamExecutionEnvironment.get_execution_environment(CONFIG | {"execution.state-recovery.path": v2_path})
    env.from_collection(new).uid("events").key_by("key").process(CountV2()).uid("count").sink_to(CollectSink("v2"))
    rows = CollectSink.rows(env.execute("v2"))
    expected_n, expected_amount = Counter(counted), Counter(amounts)
    for e in new:
        expected_n[e["key"]] += 1
        expected_amount[e["key"]] += e["amount"]
    final = {r["key"]: (r["count"], r["amount"]) for r in rows}
    assert final == {k: (expected_n[k], expected_amount[k]) for k in {e["key"] for e in new}}
    per_key = counts_per_key(rows)
    for key, emitted in per_key.items():
        start = counted.get(key, 0)
        assert emitted == list(range(start + 1, start + 1 + len(emitted))), f"key {key}"


class CountAndAmount(KeyedProcessFunction):
    """Counts events per key in ``count`` and sums their amounts in ``amount``; emits both per event."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))
        self.amount = runtime_context.get_state(ValueStateDescriptor("amount"))

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        self.amount.update((self.amount.value() or 0) + value["amount"])
        yield {"key": value["key"], "count": self.count.value(), "amount": self.amount.value()}


def test_a_state_dropped_explicitly_starts_empty_and_the_others_resume(tmp_path):
    history = _events(2000, 100, seed=9)
    counts, amounts = Counter(e["key"] for e in history), Counter()
    for e in history:
        amounts[e["key"]] += e["amount"]
    data = pa.table({"key": list(counts), "count": list(counts.values()), "amount": [amounts[k] for k in counts]})
    base = str(tmp_path / "sp")
    both = SavepointWriter.new_savepoint().with_operator(
        "count", OperatorTransformation.bootstrap_with(data).key_by("key").states("count", "amount")
    ).write(base)  # fmt: skip
    counted = data.select(["key", "count"])
    with pytest.raises(StateLossError, match="does not write 'amount'.*drop_state\\('count', 'amount'\\)"):
        SavepointWriter.from_existing_savepoint(both).with_operator(
            "count", OperatorTransformation.bootstrap_with(counted).key_by("key").states("count")
        ).write(base)  # fmt: skip
    dropped = SavepointWriter.from_existing_savepoint(both).drop_state("count", "amount").write(base)

    new = _events(600, 120, seed=10)  # keys 100..119 have no history
    rows = run_count_job(CONFIG | {"execution.state-recovery.path": dropped}, new, function=CountAndAmount())
    new_amounts: Counter = Counter()
    for e in new:
        new_amounts[e["key"]] += e["amount"]
    final = {r["key"]: (r["count"], r["amount"]) for r in rows}
    new_counts = Counter(e["key"] for e in new)
    assert final == {k: (counts.get(k, 0) + new_counts[k], new_amounts[k]) for k in new_counts}
    for key, emitted in counts_per_key(rows).items():
        assert emitted == list(range(counts.get(key, 0) + 1, counts.get(key, 0) + 1 + new_counts[key])), f"key {key}"


@pytest.mark.parametrize(("backend", "incremental"), [("hashmap", True), ("rocksdb", True), ("rocksdb", False)])
def test_derived_savepoint_of_an_incremental_or_rocksdb_checkpoint_resumes_exactly(tmp_path, backend, incremental):
    if backend == "rocksdb":
        pytest.importorskip("rocksdict")
    directory = str(tmp_path / "checkpoints")
    extra = {"state.backend.type": backend}
    if incremental:
        extra |= {
            "execution.checkpointing.incremental": True,
            "execution.checkpointing.incremental.max-chain-length": 5,
        }
    job_id = run_and_cancel(build(checkpoint_config(directory, "aligned") | extra), directory, checkpoints=3)
    latest = list_completed_checkpoints(directory, job_id)[-1]
    if incremental:
        assert "state_chains" in latest.properties, "the source checkpoint is not incremental"
    reader = SavepointReader.read(directory)
    assert reader.checkpoint.checkpoint_id == latest.checkpoint_id
    state = reader.read_keyed_state("count").to_pylist()
    assert state and all(r["count"] == r["next_seq"] for r in state)
    assert sorted(t["key"] for t in reader.read_timers("count").to_pylist()) == sorted(r["key"] for r in state)

    derived = SavepointWriter.from_existing_savepoint(directory).write(str(tmp_path / "savepoints"))
    copy = SavepointReader.read(derived)
    assert copy.checkpoint.kind == "savepoint" and "state_chains" not in copy.checkpoint.properties
    assert copy.read_keyed_state("count").equals(reader.read_keyed_state("count"))
    resumed = build(
        checkpoint_config(directory, "aligned")
        | extra
        | {"execution.state-recovery.path": derived, "parallelism.default": 3},
        seconds_per_record=0,
    ).execute("resumed")
    counts = {row["key"]: row["count"] for row in CollectSink.rows(resumed)}
    assert counts == {key: RECORDS_PER_KEY for key in range(NUM_KEYS)}


def test_change_max_parallelism_and_remove_an_operator(tmp_path):
    history = _events(2000, 200, seed=5)
    counts = Counter(e["key"] for e in history)
    data = pa.table({"key": list(counts), "count": list(counts.values())})
    base = str(tmp_path / "sp")
    first = SavepointWriter.new_savepoint(max_parallelism=128).with_operator(
        "count", OperatorTransformation.bootstrap_with(data).key_by("key").states("count")
    ).with_operator(
        "other", OperatorTransformation.bootstrap_with(data).key_by("key").states("count")
    ).write(base)  # fmt: skip
    second = (
        SavepointWriter.from_existing_savepoint(first).remove_operator("other").with_max_parallelism(32).write(base)
    )
    reader = SavepointReader.read(second)
    assert reader.operator_uids() == ["count"] and reader.max_parallelism == {"count": 32}
    assert max(reader.read_keyed_state("count")["key_group"].to_pylist()) < 32
    new = _events(500, 200, seed=6)
    config = CONFIG | {"pipeline.max-parallelism": 32, "execution.state-recovery.path": second}
    resumed = counts_per_key(run_count_job(config, new))
    for key, emitted in resumed.items():
        assert emitted == list(range(counts[key] + 1, counts[key] + 1 + len(emitted))), f"key {key}"


def test_bad_input_is_named(tmp_path):
    base = str(tmp_path / "sp")
    with pytest.raises(StateProcessorError, match="key column 'user'.*'key'"):
        SavepointWriter.new_savepoint().with_operator(
            "count", OperatorTransformation.bootstrap_with([{"key": 1, "count": 2}]).key_by("user").states("count")
        ).write(base)  # fmt: skip
    with pytest.raises(StateProcessorError, match="key 1 appears in more than one row"):
        SavepointWriter.new_savepoint().with_operator("count", OperatorTransformation.bootstrap_with(
            [{"key": 1, "count": 2}, {"key": 1, "count": 3}]).key_by("key").states("count")
        ).write(base)  # fmt: skip
    with pytest.raises(StateProcessorError, match="no column 'total'"):
        SavepointWriter.new_savepoint().with_operator("count", OperatorTransformation.bootstrap_with(
            [{"key": 1, "count": 2}]).key_by("key").states("total")
        ).write(base)  # fmt: skip
    with pytest.raises(StateProcessorError, match="max parallelism must be an int"):
        SavepointWriter.new_savepoint(max_parallelism=0)
    with pytest.raises(CheckpointNotFoundError):
        SavepointReader.read(str(tmp_path / "nothing"))
    assert not list_completed_checkpoints(base), "a failed write committed a savepoint"


# -- with Spark: a Delta table of history, and SQL over state ----------------------------------------

ONE_MILLION = 1_000_000


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_bootstrap_one_million_keys_from_a_delta_table_with_spark(spark, tmp_path):  # noqa: F811
    from pyspark.sql import functions as F

    history_path = str(tmp_path / "history")
    # 2.5M events over exactly 1M keys (3 events for half of them, 2 for the other half), in a Delta table
    spark.range(2_500_000).select(
        ((F.col("id") * 48271) % ONE_MILLION).alias("key"), (F.col("id") % 97).alias("amount")
    ).write.format("delta").save(history_path)
    history = spark.read.format("delta").load(history_path)

    started = time.monotonic()
    counts = history.groupBy("key").agg(F.count("*").alias("count"))
    path = SavepointWriter.new_savepoint().with_operator(
        OperatorIdentifier.for_uid("count"), OperatorTransformation.bootstrap_with(counts).key_by("key").states("count")
    ).write(str(tmp_path / "savepoints"))  # fmt: skip
    bootstrap_seconds = time.monotonic() - started

    state = SavepointReader.read(path).read_keyed_state("count")
    assert state.num_rows == ONE_MILLION and pc.sum(state["count"]).as_py() == 2_500_000

    # new events: 3000 over 2000 old keys and 100 keys the history never saw
    rng = random.Random(7)
    old_keys = rng.sample(range(ONE_MILLION), 2000)
    new = [
        {"key": rng.choice(old_keys + list(range(ONE_MILLION, ONE_MILLION + 100))), "amount": 1} for _ in range(3000)
    ]
    resumed = counts_per_key(run_count_job(CONFIG | {"execution.state-recovery.path": path}, new))

    # what a job that processed the whole history and then the new events ends with, computed by Spark
    everything = history.select("key").unionByName(spark.createDataFrame([(e["key"],) for e in new], "key long"))
    touched = {e["key"] for e in new}
    expected = {
        r["key"]: r["count"]
        for r in everything.where(F.col("key").isin(list(touched))).groupBy("key").count().collect()
    }
    new_per_key = Counter(e["key"] for e in new)
    assert set(resumed) == touched
    for key, emitted in resumed.items():
        before = expected[key] - new_per_key[key]
        assert emitted == list(range(before + 1, expected[key] + 1)), f"key {key}"
    print(f"bootstrap of 1M keys from Delta with Spark: {bootstrap_seconds:.1f} s")


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_delete_keys_with_spark_sql_and_the_resumed_job_no_longer_has_them(spark, tmp_path):  # noqa: F811
    history = _events(20_000, 2000, seed=8)
    counts = Counter(e["key"] for e in history)
    base = str(tmp_path / "checkpoints")
    source = SavepointWriter.new_savepoint().with_operator("count", OperatorTransformation.bootstrap_with(
        spark.createDataFrame([(k, n) for k, n in counts.items()], "key long, count long")).key_by("key").states("count")
    ).write(base)  # fmt: skip

    forget = sorted(counts)[::10]  # 200 customers asked to be forgotten
    spark.createDataFrame([(k,) for k in forget], "key long").createOrReplaceTempView("forget")
    state_table = str(tmp_path / "count_state")
    SavepointReader.read(source, spark=spark).read_keyed_state("count").write.format("delta").save(state_table)
    spark.sql(f"MERGE INTO delta.`{state_table}` s USING forget f ON s.key = f.key WHEN MATCHED THEN DELETE")
    spark.sql(f"UPDATE delta.`{state_table}` SET count = count + 1000 WHERE key = {sorted(counts)[1]}")
    edited = spark.read.format("delta").load(state_table)
    derived = SavepointWriter.from_existing_savepoint(source).with_operator(
        "count", OperatorTransformation.bootstrap_with(edited).key_by("key").states("count")
    ).write(base)  # fmt: skip

    kept = SavepointReader.read(derived).read_keyed_state("count")
    assert set(kept["key"].to_pylist()) == set(counts) - set(forget)
    assert SavepointReader.read(source).read_keyed_state("count").num_rows == len(counts), "the source changed"

    new = [{"key": k, "amount": 1} for k in sorted(counts)[:40]]  # forgotten keys 0, 10, 20, 30 among them
    resumed = counts_per_key(run_count_job(CONFIG | {"execution.state-recovery.path": derived}, new))
    repaired = sorted(counts)[1]
    for key, emitted in resumed.items():
        if key in forget:
            assert emitted == [1], f"forgotten key {key} still had state: {emitted}"
        elif key == repaired:
            assert emitted == [counts[key] + 1001]
        else:
            assert emitted == [counts[key] + 1], f"key {key}"
