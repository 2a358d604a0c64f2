"""Fraud detection through Spark: a keyed engine job read with ``spark.readStream.format("flinklike")``.

The engine job (Flink's fraud-detection walkthrough) runs over a generated
stream of card transactions, one per card per second of event time. A small
transaction (under 5.00) followed by a large one (over 500.00) on the same
card within a minute raises an alert. Keyed state remembers the small
transaction; an event-time timer forgets it after the minute. The job takes
checkpoints into Delta tables; Spark reads the alerts committed at each
checkpoint and writes them to a Delta table with Spark's own Delta sink
(``trigger(availableNow=True)``: the bounded job is read to its end).

Run with plain Python (local Spark, engine TaskExecutors as local processes)::

    python3 examples/fraud_detection.py [WORK_DIR]

or with spark-submit, shipping the package and this file to the executors::

    zip -qr /tmp/flinklike.zip flinklike_spark connectors checkpointing
    PYTHONPATH=$PWD/examples spark-submit --master 'local[2]' \\
        --packages io.delta:delta-spark_4.2_2.13:4.4.0 \\
        --conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension \\
        --conf spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog \\
        --conf spark.pyspark.python=$(which python3) \\
        --py-files /tmp/flinklike.zip,examples/fraud_detection.py examples/fraud_detection.py [WORK_DIR]
"""

from __future__ import annotations

import sys
import tempfile
from datetime import timedelta
from pathlib import Path

import pyarrow as pa

from connectors import SequenceSource
from flinklike_spark import KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor, WatermarkStrategy

CARDS = 20
TRANSACTIONS_PER_CARD = 600
SMALL, LARGE = 5.00, 500.00
WINDOW = timedelta(minutes=1)
ALERTS = pa.schema([("card", pa.int64()), ("seq", pa.int64()), ("small_seq", pa.int64()), ("amount", pa.float64())])


def amount(card: int, seq: int) -> float:
    """A deterministic pseudo-random amount, so the expected alerts can be computed without the engine."""
    return ((card * 7919 + seq * 104729) * 2654435761 % 2**32) % 100_000 / 100


class FraudDetector(KeyedProcessFunction):
    """Alerts on a small transaction followed within WINDOW by a large one (per card)."""

    def open(self, runtime_context):
        self.small = runtime_context.get_state(ValueStateDescriptor("last_small_seq"))

    def process_element(self, value, ctx):
        small_seq = self.small.value()
        # The window is checked here too: the timer fires only once the watermark passed it.
        within = small_seq is not None and (value["seq"] - small_seq) * 1000 <= WINDOW.total_seconds() * 1000
        if within and value["amount"] > LARGE:
            yield {"card": value["card"], "seq": value["seq"], "small_seq": small_seq, "amount": value["amount"]}
            self.small.clear()
        if value["amount"] < SMALL:
            self.small.update(value["seq"])
            # Forget the small transaction a minute later (event time).
            ctx.timer_service().register_event_time_timer(ctx.timestamp() + int(WINDOW.total_seconds() * 1000))

    def on_timer(self, timestamp, ctx):
        small_seq = self.small.value()
        if small_seq is not None and small_seq * 1000 + WINDOW.total_seconds() * 1000 <= timestamp:
            self.small.clear()


def detect_fraud(env: StreamExecutionEnvironment):
    """The pipeline Spark reads (option ``pipeline="fraud_detection:detect_fraud"``)."""
    transactions = (
        env.from_source(
            SequenceSource(num_keys=CARDS, records_per_key=TRANSACTIONS_PER_CARD, rows_per_second=6_000),
            WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda row: row["seq"] * 1000),
            name="transactions",
        )
        .uid("transactions")
        .set_parallelism(1)  # one generator: event time never runs ahead of a card's transactions
        .map(
            lambda row: {"card": row["key"], "seq": row["seq"], "amount": amount(row["key"], row["seq"])},
            output_type=pa.schema([("card", pa.int64()), ("seq", pa.int64()), ("amount", pa.float64())]),
        )
        .set_parallelism(1)  # chained to the generator: a rebalance here would reorder a card's transactions
    )
    return transactions.key_by("card").process(FraudDetector(), output_type=ALERTS).uid("fraud-detector")


def expected_alerts() -> set[tuple[int, int]]:
    """(card, seq) of every alert, computed directly."""
    alerts = set()
    for card in range(CARDS):
        small = None
        for seq in range(TRANSACTIONS_PER_CARD):
            if small is not None and seq - small > WINDOW.total_seconds():
                small = None
            value = amount(card, seq)
            if small is not None and value > LARGE:
                alerts.add((card, seq))
                small = None
            if value < SMALL:
                small = seq
    return alerts


def main(work: Path) -> None:
    from flinklike_spark.spark import session

    spark = session("fraud-detection")
    spark.sparkContext.setLogLevel("ERROR")
    alerts = (
        spark.readStream.format("flinklike")
        .option("pipeline", "fraud_detection:detect_fraud")
        .option("execution.checkpointing.dir", str(work / "job"))
        .option("execution.checkpointing.interval", "500 ms")
        .option("parallelism.default", "2")
        .load()
    )
    query = (
        alerts.writeStream.format("delta")
        .option("checkpointLocation", str(work / "spark-checkpoint"))
        .trigger(availableNow=True)
        .start(str(work / "alerts"))
    )
    query.awaitTermination()
    found = spark.read.format("delta").load(str(work / "alerts"))
    rows = {(r.card, r.seq) for r in found.select("card", "seq").collect()}
    expected = expected_alerts()
    print(
        f"{found.count()} alerts over {CARDS} cards x {TRANSACTIONS_PER_CARD} transactions (expected {len(expected)})"
    )
    print(f"exactly once and as expected: {rows == expected and found.count() == len(expected)}")
    found.orderBy("card", "seq").show(5)
    spark.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="fraud-")))
