"""A running keyed job rescaled up and down by the adaptive scheduler: how long the job stops, and what it costs.

A keyed running count (``--keys`` keys of ValueState, SequenceSource at ``--rate``
records/s) writes to a DeltaSink on a local cluster of one TaskExecutor with 2
slots, ``slotmanager.number-of-slots.max`` 4. Once every key has state, the
job's requirements are raised to 4 (a TaskExecutor starts, the job stops after
a checkpoint and restores at parallelism 4), then lowered to 2 (the started
TaskExecutor falls idle and stops). Printed per rescale: its duration (request
to every task running again, from the rescale's own record), the checkpoint it
went through and its state size, the slots before and after; and the ratio of
each rescale's duration to the job's median checkpoint duration. The Delta
output is checked before any figure counts: every row's count is its seq + 1
(keyed state moved intact) and no (key, seq) repeats.

    python benchmarks/rescale.py [--keys N] [--rate R]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

from deltalake import DeltaTable
from quiet import QuietWatch

from connectors import DeltaSink, SequenceSource
from flinklike_spark import KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor
from flinklike_spark.errors import JobCancelledError


class RunningCount(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield {"key": value["key"], "seq": value["seq"], "count": count}


def _get(url: str):
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.load(response)


def _bounds(client, upper: int) -> dict:
    return {v: {"parallelism": {"lowerBound": 1, "upperBound": upper}} for v in client.get_resource_requirements()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=50_000)
    parser.add_argument("--rate", type=float, default=20_000.0)
    parser.add_argument("--settle", type=float, default=5.0, help="seconds between the steps")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rescale-bench-"))
    env = StreamExecutionEnvironment.get_execution_environment({
        "jobmanager.scheduler": "adaptive", "parallelism.default": 2, "rest.port": 0,
        "local.number-taskmanager": 1, "taskmanager.numberOfTaskSlots": 2, "slotmanager.number-of-slots.max": 4,
        "execution.checkpointing.interval": "1s", "execution.checkpointing.dir": str(work / "checkpoints"),
    })  # fmt: skip
    source = SequenceSource(num_keys=args.keys, records_per_key=None, rows_per_second=args.rate)
    (
        env.from_source(source, name="numbers").uid("numbers")
        .key_by("key").process(RunningCount()).uid("count")
        .sink_to(DeltaSink(work / "out")).uid("out")
    )  # fmt: skip
    with QuietWatch() as watch:
        client = env.execute_async("rescale benchmark")
        base = f"{client.web_interface_url}/jobs/{client.job_id}"
        while client.get_job_status().name != "RUNNING":
            time.sleep(0.1)
        time.sleep(max(args.settle, 1.5 * args.keys / args.rate))  # every key has state
        slots = [len(_get(f"{client.web_interface_url}/taskmanagers")["taskmanagers"]) * 2]
        events = []
        sizes = {}
        for upper in (4, 2):
            event = client.update_resource_requirements(_bounds(client, upper))
            events.append(event)
            sizes[event["checkpoint"]] = _get(f"{base}/checkpoints/details/{event['checkpoint']}")["state_size"]
            time.sleep(args.settle)
            slots.append(len(_get(f"{client.web_interface_url}/taskmanagers")["taskmanagers"]) * 2)
        checkpoints = _get(f"{base}/checkpoints")
        client.cancel()
        try:
            client.wait(120)
        except JobCancelledError:
            pass

    rows = DeltaTable(str(work / "out")).to_pyarrow_table(columns=["key", "seq", "count"]).to_pylist()
    assert rows and all(r["count"] == r["seq"] + 1 for r in rows), "a count is not its seq + 1: keyed state was lost"
    assert len({(r["key"], r["seq"]) for r in rows}) == len(rows), "a (key, seq) was written twice"
    median_checkpoint = checkpoints["summary"]["end_to_end_duration"]["p50"]
    print(f"{len(rows):,} rows checked exactly once; {args.keys:,} keys; median checkpoint {median_checkpoint} ms")
    for event, before, after in zip(events, slots[:-1], slots[1:], strict=True):
        widest = max(event["parallelismAfter"].values())
        size = sizes[event["checkpoint"]]
        print(
            f"rescale {max(event['parallelismBefore'].values())} -> {widest}: {event['durationMs']} ms "
            f"({event['durationMs'] / max(median_checkpoint, 1):.1f}x the median checkpoint), through checkpoint "
            f"{event['checkpoint']} ({size / 1e6:.1f} MB of state), slots {before} -> {after}"
        )
    print(f"median rescale: {statistics.median(e['durationMs'] for e in events):.0f} ms")
    watch.report()


if __name__ == "__main__":
    main()
