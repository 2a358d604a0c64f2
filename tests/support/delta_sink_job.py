"""The keyed job of the Delta sink tests, and reading its output table in commit order.

``build`` makes SequenceSource -> key_by -> a slow pass-through stage (so there
is backpressure and data in flight) -> DeltaSink; ``rows_in_commit_order``
reads a table in the order the Delta log added its files (then row order), and
``assert_exactly_once_in_order`` checks that every key's ``seq`` values are
exactly ``0 .. RECORDS_PER_KEY - 1`` in that order.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow.parquet as pq

from connectors import DeltaSink, SequenceSource
from flinklike_spark import KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor

__all__ = [
    "NUM_KEYS",
    "RECORDS_PER_KEY",
    "InOrderPerKey",
    "SlowPassThrough",
    "assert_exactly_once_in_order",
    "assert_prefix_exactly_once_in_order",
    "build",
    "rows_in_commit_order",
]

NUM_KEYS = 12
RECORDS_PER_KEY = 3_000


class SlowPassThrough(KeyedProcessFunction):
    def __init__(self, seconds_per_record: float) -> None:
        self.seconds_per_record = seconds_per_record

    def process_element(self, value, ctx):
        time.sleep(self.seconds_per_record)
        yield value


class InOrderPerKey(KeyedProcessFunction):
    """Passes records on, ``seconds_per_record`` each; raises on a lost, duplicated or reordered ``seq`` (keyed
    state must survive every restore and rescale)."""

    def __init__(self, seconds_per_record: float = 0.0) -> None:
        self.seconds_per_record = seconds_per_record

    def open(self, runtime_context):
        self.next_seq = runtime_context.get_state(ValueStateDescriptor("next_seq"))

    def process_element(self, value, ctx):
        expected = self.next_seq.value() or 0
        if value["seq"] != expected:
            raise AssertionError(f"key {value['key']}: got seq {value['seq']}, expected {expected}")
        self.next_seq.update(expected + 1)
        if self.seconds_per_record:
            time.sleep(self.seconds_per_record)
        yield value


def build(config: dict, table: Path, *, seconds_per_record: float) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment(config)
    (
        env.from_source(SequenceSource(num_keys=NUM_KEYS, records_per_key=RECORDS_PER_KEY), name="seq")
        .uid("seq")
        .key_by("key")
        .process(SlowPassThrough(seconds_per_record))
        .uid("slow")
        .sink_to(DeltaSink(table))
        .uid("delta")
    )
    return env


def rows_in_commit_order(table: Path) -> list[dict]:
    """Every row of the table, in the order the Delta log added the files (then row order)."""
    rows = []
    for log in sorted((table / "_delta_log").glob("*.json")):
        for line in log.read_text().splitlines():
            action = json.loads(line)
            if "remove" in action:
                raise AssertionError(f"an append-only sink removed a file: {action}")
            if "add" in action:
                rows += pq.read_table(table / action["add"]["path"]).to_pylist()
    return rows


def assert_exactly_once_in_order(
    table: Path, *, num_keys: int = NUM_KEYS, records_per_key: int = RECORDS_PER_KEY
) -> None:
    per_key: dict[int, list[int]] = {}
    for row in rows_in_commit_order(table):
        per_key.setdefault(row["key"], []).append(row["seq"])
    assert sorted(per_key) == list(range(num_keys))
    for key, seqs in sorted(per_key.items()):
        if seqs != list(range(records_per_key)):
            duplicated = len(seqs) - len(set(seqs))
            missing = sorted(set(range(records_per_key)) - set(seqs))[:5]
            raise AssertionError(
                f"key {key}: {len(seqs)} rows, {duplicated} duplicated, first missing {missing}, "
                f"in order: {seqs == sorted(seqs)}"
            )


def assert_prefix_exactly_once_in_order(table: Path, *, num_keys: int) -> None:
    """Of a cancelled unbounded job: every key's ``seq`` values are ``0 .. n - 1`` for some n, in commit order."""
    per_key: dict[int, list[int]] = {}
    for row in rows_in_commit_order(table):
        per_key.setdefault(row["key"], []).append(row["seq"])
    assert sorted(per_key) == list(range(num_keys))
    for key, seqs in sorted(per_key.items()):
        if seqs != list(range(len(seqs))):
            duplicated = len(seqs) - len(set(seqs))
            missing = sorted(set(range(max(seqs) + 1)) - set(seqs))[:5]
            raise AssertionError(
                f"key {key}: {len(seqs)} rows, {duplicated} duplicated, first missing {missing}, "
                f"in order: {seqs == sorted(seqs)}"
            )
