"""Per-user tumbling event-time windows with late data to a side output.

Clicks of a few users arrive out of order. Each user's clicks are counted per
10-second window of event time; the watermark trails the largest timestamp by
2 seconds, windows accept late clicks for 3 more seconds (allowed lateness,
each one fires the window again with the updated count), and clicks later than
that go to the "late-clicks" side output instead of being dropped. The counts
are checked against a plain-Python computation.

Run:  python examples/windowed_clicks.py   (or: flinklike run examples/windowed_clicks.py)
"""

from __future__ import annotations

import collections
import random
import sys
from datetime import timedelta

from connectors import CollectSink
from flinklike_spark import OutputTag, ProcessWindowFunction, StreamExecutionEnvironment, WatermarkStrategy
from flinklike_spark.datastream.window import Time, TumblingEventTimeWindows

WINDOW_MS = 10_000
OUT_OF_ORDERNESS_MS = 2_000
ALLOWED_LATENESS_MS = 3_000
LATE_CLICKS = OutputTag("late-clicks")


def clicks(n: int = 2_000, seed: int = 7) -> list[dict]:
    """Clicks every ~100 ms, most a little out of order, one in 50 delayed by 4-12 seconds."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        ts = i * 100 + rng.randint(0, 1_500)
        if rng.random() < 0.02:
            ts = max(0, ts - rng.randint(4_000, 12_000))
        rows.append({"user": f"user-{rng.randrange(5)}", "page": f"/p{rng.randrange(20)}", "ts": ts})
    return rows


class CountClicks(ProcessWindowFunction):
    def process(self, key, context, elements):
        window = context.window()
        yield {"user": key, "window_start": window.start, "window_end": window.end, "clicks": len(elements)}


def build(env: StreamExecutionEnvironment, rows: list[dict]) -> tuple[CollectSink, CollectSink]:
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(
        timedelta(milliseconds=OUT_OF_ORDERNESS_MS)
    ).with_timestamp_assigner("ts")
    counts = (
        env.from_collection(rows, watermark_strategy=strategy, batch_size=10)
        .key_by("user")
        .window(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW_MS)))
        .allowed_lateness(ALLOWED_LATENESS_MS)
        .side_output_late_data(LATE_CLICKS)
        .process(CountClicks())
        .uid("clicks-per-user-window")
    )
    counts_sink, late_sink = CollectSink("counts"), CollectSink("late")
    counts.sink_to(counts_sink)
    counts.get_side_output(LATE_CLICKS).sink_to(late_sink)
    return counts_sink, late_sink


def expected(rows: list[dict], batch_size: int = 10) -> tuple[dict, int]:
    """Plain Python: final count per (user, window) and the number of clicks too late for their window."""
    final = collections.Counter()
    late = 0
    watermark = max_ts = -(2**63)
    for i in range(0, len(rows), batch_size):
        for row in rows[i : i + batch_size]:
            start = row["ts"] - row["ts"] % WINDOW_MS
            if start + WINDOW_MS - 1 + ALLOWED_LATENESS_MS <= watermark:
                late += 1
            else:
                final[(row["user"], start)] += 1
        max_ts = max(max_ts, *(r["ts"] for r in rows[i : i + batch_size]))
        watermark = max_ts - OUT_OF_ORDERNESS_MS - 1
    return dict(final), late


def main() -> int:
    rows = clicks()
    env = StreamExecutionEnvironment.get_execution_environment({"parallelism.default": 2})
    counts_sink, late_sink = build(env, rows)
    result = env.execute("windowed clicks")
    firings = counts_sink.rows(result)
    final: dict = {}
    for row in firings:  # a window fires again for each late click it accepts: keep the largest count
        window = (row["user"], row["window_start"])
        final[window] = max(final.get(window, 0), row["clicks"])
    late = late_sink.rows(result)
    print(
        f"{len(rows)} clicks -> {len(firings)} window firings for {len(final)} (user, window) pairs, "
        f"{len(firings) - len(final)} of them late firings; {len(late)} clicks to the side output"
    )
    for (user, start), n in sorted(final.items())[:5]:
        print(f"  {user} [{start}, {start + WINDOW_MS}): {n} clicks")
    want, want_late = expected(rows)
    if final != want or len(late) != want_late:
        print(f"WRONG: expected {len(want)} windows and {want_late} late clicks", file=sys.stderr)
        return 1
    print("matches the plain-Python computation")
    return 0


if __name__ == "__main__":
    sys.exit(main())
