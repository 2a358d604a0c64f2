"""Spark in, engine, Spark out: keyed event-time windows with late data on Spark's rate source.

Spark's rate-micro-batch source produces values 0, 1, 2, ... (here the first
``N``, 500 per micro-batch). The
engine pipeline :func:`windows` gives each value a key (``value % 3``) and an
event time (``value * 100`` ms; every tenth value from the 400th on is 30 s late), sums each key's
values per 2-second tumbling event-time window (watermark 1 s behind the
largest event time), and sends values that arrive after their window closed to
a side output. Both come back to Spark through
:func:`flinklike_spark.spark.transform`, and Spark writes them to a Delta table.
The Delta table is then checked against plain Python: every window that closed
holds exactly the sum and count of its values minus the late ones, and only
values that were made late are reported late.

Run:  python examples/spark_windows.py [work directory]
"""

from __future__ import annotations

import collections
import os
import sys
import tempfile
import time
from datetime import timedelta

import pyarrow as pa

from flinklike_spark import OutputTag, ProcessWindowFunction, StreamExecutionEnvironment, WatermarkStrategy
from flinklike_spark.datastream.window import Time, TumblingEventTimeWindows

N = 3_000  # values 0 .. N-1
KEYS = 3
STEP_MS = 100  # event time of value v: v * 100 ms ...
LATE_BY_MS = 30_000  # ... minus 30 s for every tenth value
WINDOW_MS = 2_000
OUT_OF_ORDERNESS_MS = 1_000

RESULT = pa.schema([
    ("kind", pa.string()), ("key", pa.int64()), ("window_start", pa.int64()), ("count", pa.int64()),
    ("total", pa.int64()),
])  # fmt: skip
TIMED = pa.schema([("key", pa.int64()), ("value", pa.int64()), ("ts", pa.int64())])
LATE = OutputTag("late", TIMED)


def made_late(value: int) -> bool:
    """Every tenth value, once event time is past 40 s (no negative event times)."""
    return value % 10 == 9 and value * STEP_MS >= LATE_BY_MS + 10_000


def event_ms(value: int) -> int:
    return value * STEP_MS - (LATE_BY_MS if made_late(value) else 0)


class SumWindow(ProcessWindowFunction):
    def process(self, key, context, elements):
        values = [e["value"] for e in elements]
        yield {
            "kind": "window",
            "key": key,
            "window_start": context.window().start,
            "count": len(values),
            "total": sum(values),
        }


def windows(env: StreamExecutionEnvironment, stream):
    """The engine pipeline (``function(env, stream)``): Spark's ``value`` rows in, window sums and late rows out."""
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(
        timedelta(milliseconds=OUT_OF_ORDERNESS_MS)
    ).with_timestamp_assigner("ts")
    sums = (
        stream.map(
            lambda r: {"key": r["value"] % KEYS, "value": r["value"], "ts": event_ms(r["value"])}, output_type=TIMED
        )
        .assign_timestamps_and_watermarks(strategy)
        .key_by("key")
        .window(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW_MS)))
        .side_output_late_data(LATE)
        .process(SumWindow(), output_type=RESULT)
        .uid("window-sums")
    )
    late = sums.get_side_output(LATE).map(
        lambda r: {
            "kind": "late",
            "key": r["key"],
            "window_start": r["ts"] - r["ts"] % WINDOW_MS,
            "count": 1,
            "total": r["value"],
        },
        output_type=RESULT,
    )
    return sums.union(late)


def closed_windows_bound() -> int:
    """Windows ending at or before this event time have closed once every value was read."""
    # The watermark is the smallest of the source subtasks' (largest event time - 1 s - 1 ms);
    # each of the rate source's two partitions ends within the last two values.
    return (N - 2) * STEP_MS - OUT_OF_ORDERNESS_MS - 1


def check(rows: list[dict]) -> str | None:
    """Compare Spark's Delta output with plain Python; None if it matches, else what is wrong."""
    bound = closed_windows_bound()
    late_values = [r["total"] for r in rows if r["kind"] == "late"]
    if len(late_values) != len(set(late_values)):
        return "a late value was reported twice"
    if not all(made_late(v) for v in late_values):
        return f"values that were not made late were reported late: {[v for v in late_values if not made_late(v)][:5]}"
    if not late_values:
        return "no value was reported late"
    expected: dict = collections.defaultdict(lambda: [0, 0])
    late = set(late_values)
    for value in range(N):
        start = event_ms(value) - event_ms(value) % WINDOW_MS
        if start + WINDOW_MS <= bound and value not in late:
            expected[(value % KEYS, start)][0] += 1
            expected[(value % KEYS, start)][1] += value
    fired = collections.Counter((r["key"], r["window_start"]) for r in rows if r["kind"] == "window")
    if any(n > 1 for n in fired.values()):
        return f"windows fired more than once: {[w for w, n in fired.items() if n > 1][:5]}"
    got = {
        (r["key"], r["window_start"]): [r["count"], r["total"]]
        for r in rows
        if r["kind"] == "window" and r["window_start"] + WINDOW_MS <= bound
    }
    if got != dict(expected):
        missing = sorted(set(expected) - set(got))[:5]
        wrong = sorted(w for w in set(expected) & set(got) if expected[w] != got[w])[:5]
        return f"window sums differ from plain Python: missing {missing}, wrong {wrong}"
    return None


def main(workdir: str) -> int:
    from flinklike_spark.spark import session, transform

    spark = session("spark-windows", config={"spark.ui.enabled": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    values = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", 500)
        .option("numPartitions", 2)
        .load()
        .where(f"value < {N}")
        .select("value")
    )
    results = transform(
        values,
        "spark_windows:windows",
        os.path.join(workdir, "job"),
        trigger={"processingTime": "1 second"},
        **{"parallelism.default": "2", "execution.checkpointing.interval": "500 ms"},
    )
    out = os.path.join(workdir, "windows")
    (
        results.writeStream.format("delta")
        .option("checkpointLocation", os.path.join(workdir, "spark-out"))
        .trigger(processingTime="1 second")
        .start(out)
    )
    deadline = time.monotonic() + 900
    problem, rows = "no output", []
    try:
        while time.monotonic() < deadline:
            time.sleep(5)
            for q in spark.streams.active:
                if q.exception() is not None:
                    raise RuntimeError(f"query {q.name} failed: {q.exception()}")
            try:
                rows = [r.asDict() for r in spark.read.format("delta").load(out).collect()]
            except Exception:  # noqa: BLE001 - not written yet
                continue
            problem = check(rows)  # windows still missing until the job read everything
            if problem is None:
                break
    finally:
        for q in spark.streams.active:
            q.stop()
    if problem is not None:
        print(f"WRONG: {problem}", file=sys.stderr)
        return 1
    late = sum(1 for r in rows if r["kind"] == "late")
    closed = sum(1 for r in rows if r["kind"] == "window" and r["window_start"] + WINDOW_MS <= closed_windows_bound())
    print(f"{N} values -> {closed} closed (key, window) sums and {late} late values in Delta table {out}")
    print("matches the plain-Python computation")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the runner imports spark_windows
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="spark-windows-")))
