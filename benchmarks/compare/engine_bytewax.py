"""Bytewax's runner (its own venv): ``python engine_bytewax.py W2 --records N --keys K --parallelism P``.

P workers in one process (``cluster_main(worker_count_per_proc=P)``), the
source partitioned P ways. Time: from the start of ``cluster_main`` to its
return. Keys are strings, as Bytewax's keyed streams require.
"""

from __future__ import annotations

import argparse
import faulthandler
import threading
import time
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from bytewax import operators as op
from bytewax.dataflow import Dataflow
from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
from bytewax.operators import windowing as win
from bytewax.outputs import DynamicSink, StatelessSinkPartition
from bytewax.testing import cluster_main
from workloads import WINDOW_MS, per_key, print_result

EPOCH = datetime(2020, 1, 1, tzinfo=UTC)


class _Partition(StatefulSourcePartition):
    """Rows ``i`` with ``i % parts == part``, as Arrow batches (W1) or lists of (key, seq) tuples."""

    def __init__(self, part: int, parts: int, records: int, keys: int, arrow: bool, batch: int) -> None:
        self.i, self.step, self.records, self.keys = part, parts, records, keys
        self.arrow, self.batch = arrow, batch

    def next_batch(self):
        if self.i >= self.records:
            raise StopIteration
        end = min(self.records, self.i + self.batch * self.step)
        if self.arrow:
            idx = np.arange(self.i, end, self.step)
            self.i += len(idx) * self.step
            return [pa.RecordBatch.from_arrays([pa.array(idx % self.keys), pa.array(idx // self.keys)], ["key", "seq"])]
        rows = [(i % self.keys, i // self.keys) for i in range(self.i, end, self.step)]
        self.i += len(rows) * self.step
        return rows

    def snapshot(self):
        return self.i


class Rows(FixedPartitionedSource):
    def __init__(self, parts: int, records: int, keys: int, arrow: bool, batch: int) -> None:
        self.args = (parts, records, keys, arrow, batch)

    def list_parts(self):
        return [str(p) for p in range(self.args[0])]

    def build_part(self, step_id, for_part, resume_state):
        return _Partition(int(for_part), *self.args)


class _Summary(StatelessSinkPartition):
    def __init__(self, totals: list, lock: threading.Lock) -> None:
        self.totals, self.lock = totals, lock

    def write_batch(self, items):
        rows = total = 0
        for item in items:
            if isinstance(item, pa.RecordBatch):
                rows += item.num_rows
                total += pc.sum(item.column("value")).as_py() or 0
            else:
                rows += 1
                total += item
        with self.lock:
            self.totals[0] += rows
            self.totals[1] += total


class Summary(DynamicSink):
    def __init__(self) -> None:
        self.totals = [0, 0]
        self.lock = threading.Lock()

    def build(self, step_id, worker_index, worker_count):
        return _Summary(self.totals, self.lock)


def flow(workload: str, records: int, keys: int, parts: int, sink: Summary) -> Dataflow:
    m = per_key(records, keys)
    f = Dataflow("compare")
    if workload == "W1":
        s = op.input("in", f, Rows(parts, records, keys, True, 65536))
        s = op.map("transform", s, lambda b: pa.RecordBatch.from_arrays(
            [b.column(0), pc.add(pc.multiply(b.column(1), 3), 1)], ["key", "value"]))  # fmt: skip
        op.output("out", s, sink)
        return f
    s = op.input("in", f, Rows(parts, records, keys, False, 4096))
    if workload == "W2":
        keyed = op.key_on("key", s, lambda row: str(row[0]))

        def count(state, row):
            state = (state or 0) + 1
            return state, (state if state == m else None)

        counts = op.filter_map("reached", op.stateful_map("count", keyed, count), lambda kv: kv[1])
        op.output("out", counts, sink)
        return f
    if workload == "W2v":
        clock = win.EventClock(
            lambda row: EPOCH + timedelta(milliseconds=row[1]), wait_for_system_duration=timedelta(days=1)
        )
        windower = win.TumblingWindower(length=timedelta(milliseconds=WINDOW_MS), align_to=EPOCH)
        out = win.count_window("count", s, clock, windower, lambda row: str(row[0]))
        op.output("out", op.map("value", out.down, lambda kv: kv[1][1]), sink)
        return f
    raise SystemExit(f"bytewax: unknown workload {workload!r}")


def main() -> None:
    faulthandler.enable(all_threads=True)  # a native crash (SIGSEGV) leaves every thread's stack on stderr
    parser = argparse.ArgumentParser()
    parser.add_argument("workload")
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--parallelism", type=int, default=1)
    args = parser.parse_args()
    sink = Summary()
    dataflow = flow(args.workload, args.records, args.keys, args.parallelism, sink)
    started = time.perf_counter()
    cluster_main(dataflow, [], 0, worker_count_per_proc=args.parallelism)
    elapsed = time.perf_counter() - started
    rows, total = sink.totals
    print_result(elapsed, {"rows": rows, "total": total} if args.workload == "W1" else {"rows": rows, "sum": total})


if __name__ == "__main__":
    main()
