"""Exactly-once into Delta: checkpoints, a stop, a resume, and a look at the tables.

SequenceSource -> key_by("key") -> a running count per key -> DeltaSink. The
first run takes unaligned checkpoints every 200 ms and is stopped with a
savepoint half-way; the second run resumes from the checkpoint directory and
finishes. The output table then holds every (key, seq) exactly once.

Run:  python examples/exactly_once_delta.py [WORK_DIR]
Then: flinklike checkpoints WORK_DIR/checkpoints
      flinklike inspect WORK_DIR/checkpoints --checkpoint N --operator counter
      (and with Spark: spark.read.format("delta").load("WORK_DIR/out"))
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from checkpointing import list_completed_checkpoints
from connectors import DeltaSink, SequenceSource, read_delta_table
from flinklike_spark import KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor
from flinklike_spark.errors import JobCancelledError

NUM_KEYS = 8
RECORDS_PER_KEY = 2_000


class RunningCount(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield {"key": value["key"], "seq": value["seq"], "count": count}


def job(work: Path, extra: dict) -> StreamExecutionEnvironment:
    config = {
        "parallelism.default": 2,
        "execution.checkpointing.interval": "200ms",
        "execution.checkpointing.unaligned.enabled": True,
        "execution.checkpointing.dir": str(work / "checkpoints"),
        "execution.checkpointing.num-retained": 3,
    } | extra
    env = StreamExecutionEnvironment.get_execution_environment(config)
    (
        env.from_source(
            SequenceSource(num_keys=NUM_KEYS, records_per_key=RECORDS_PER_KEY, rows_per_second=4_000), name="seq"
        )
        .uid("seq")
        .key_by("key")
        .process(RunningCount())
        .uid("counter")
        .sink_to(DeltaSink(work / "out"))
        .uid("delta-out")
    )
    return env


def main(work: Path) -> None:
    client = job(work, {}).execute_async("first run")
    while not list_completed_checkpoints(work / "checkpoints", client.job_id):
        time.sleep(0.1)
    time.sleep(1.0)
    savepoint = client.stop_with_savepoint(60)
    try:
        client.wait(60)
    except JobCancelledError:
        pass
    print(f"stopped with savepoint {savepoint.checkpoint_id} at {savepoint.path}")

    job(work, {"execution.state-recovery.path": str(work / "checkpoints")}).execute("resumed run")
    rows = read_delta_table(work / "out").to_pylist()
    per_key = {k: sorted(r["seq"] for r in rows if r["key"] == k) for k in range(NUM_KEYS)}
    exact = all(seqs == list(range(RECORDS_PER_KEY)) for seqs in per_key.values())
    print(f"{len(rows)} rows in {work / 'out'}; every (key, seq) exactly once: {exact}")
    if not exact:
        sys.exit(1)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="flinklike-example-")))
