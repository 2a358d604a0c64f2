"""Kafka -> keyed state -> Kafka, exactly once, with PyFlink's Kafka API.

Orders (``{"customer", "order_id", "amount"}`` JSON) are written to a
4-partition topic; the job reads them with a ``KafkaSource``, keeps a running
total per customer in keyed state, and writes ``customer,order_id,total`` lines
with an EXACTLY_ONCE ``KafkaSink`` (one Kafka transaction per subtask and
checkpoint, committed when the checkpoint completes). The job runs until it has
written the totals of the first half of the orders and is stopped with a
savepoint; the second half of the orders arrives, and the job resumes from the
savepoint at parallelism 3 until every total is committed. A ``read_committed``
consumer then checks every order's result is in the output topic exactly once.

Run:  python examples/kafka_exactly_once.py [--bootstrap-servers HOST:PORT] [--work-dir DIR]
Without ``--bootstrap-servers`` it starts a local single-node Kafka broker (Java 17 and
Maven fetch its jars on first use), as the tests do.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

from connectors.kafka.testing import LocalKafkaBroker
from flinklike_spark import (
    KeyedProcessFunction,
    RuntimeContext,
    StreamExecutionEnvironment,
    Types,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from flinklike_spark.common.serialization import SimpleStringSchema
from flinklike_spark.datastream.connectors.kafka import (
    DeliveryGuarantee,
    KafkaOffsetsInitializer,
    KafkaRecordSerializationSchema,
    KafkaSink,
    KafkaSource,
)
from flinklike_spark.datastream.formats.json import JsonRowDeserializationSchema
from flinklike_spark.errors import JobCancelledError

CUSTOMERS = 20
ORDERS_PER_CUSTOMER = 500


class RunningTotal(KeyedProcessFunction):
    def open(self, runtime_context: RuntimeContext):
        self.total = runtime_context.get_state(ValueStateDescriptor("total", Types.LONG()))

    def process_element(self, order, ctx: KeyedProcessFunction.Context):
        total = (self.total.value() or 0) + order["amount"]
        self.total.update(total)
        yield f"{order['customer']},{order['order_id']},{total}"


class CustomerKey:
    def serialize(self, line: str) -> bytes:
        return line.partition(",")[0].encode()


def write_orders(servers: str, topic: str, order_ids: range) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": servers, "enable.idempotence": True})
    for order_id in order_ids:
        for customer in range(CUSTOMERS):
            order = {"customer": customer, "order_id": order_id, "amount": order_id % 7 + 1}
            producer.produce(topic, json.dumps(order).encode(), key=str(customer).encode())
        producer.poll(0)
    producer.flush(60)


def job(
    servers: str, orders: str, totals: str, work: Path, *, parallelism: int, resume: bool
) -> StreamExecutionEnvironment:
    config = {
        "parallelism.default": parallelism,
        "execution.checkpointing.dir": str(work / "checkpoints"),
    }
    if resume:
        config["execution.state-recovery.path"] = str(work / "checkpoints")
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.enable_checkpointing(300)
    order_type = Types.ROW_NAMED(["customer", "order_id", "amount"], [Types.INT(), Types.INT(), Types.INT()])
    source = (
        KafkaSource.builder()
        .set_bootstrap_servers(servers)
        .set_topics(orders)
        .set_group_id("running-totals")
        .set_starting_offsets(KafkaOffsetsInitializer.earliest())
        .set_value_only_deserializer(JsonRowDeserializationSchema.builder().type_info(order_type).build())
        .build()
    )
    sink = (
        KafkaSink.builder()
        .set_bootstrap_servers(servers)
        .set_record_serializer(
            KafkaRecordSerializationSchema.builder()
            .set_topic(totals)
            .set_key_serialization_schema(CustomerKey())
            .set_value_serialization_schema(SimpleStringSchema())
            .build()
        )
        .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
        .set_transactional_id_prefix(f"running-totals-{totals}")
        .build()
    )
    (
        env.from_source(source, WatermarkStrategy.no_watermarks(), "orders")
        .uid("orders")
        .key_by(lambda order: order["customer"], key_type=Types.INT())
        .process(RunningTotal(), output_type=Types.STRING())
        .uid("running-total")
        .sink_to(sink)
        .uid("totals")
    )
    return env


def read_committed_lines(servers: str, topic: str) -> list[str]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": f"check-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions}
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        lines, deadline = [], time.monotonic() + 60
        while time.monotonic() < deadline and any(
            consumer.position([TopicPartition(topic, p)])[0].offset < end for p, end in ends.items() if end
        ):
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                lines.append(message.value().decode())
        return lines
    finally:
        consumer.close()


def wait_for_totals(servers: str, topic: str, count: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while len(read_committed_lines(servers, topic)) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {count} totals were committed to {topic} within {timeout} s")
        time.sleep(0.5)


def run(servers: str, work: Path) -> bool:
    orders, totals = f"orders-{uuid.uuid4().hex[:6]}", f"totals-{uuid.uuid4().hex[:6]}"
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": servers})
    for future in admin.create_topics([NewTopic(orders, 4, 1), NewTopic(totals, 4, 1)]).values():
        future.result(30)
    half = ORDERS_PER_CUSTOMER // 2
    write_orders(servers, orders, range(half))

    client = job(servers, orders, totals, work, parallelism=2, resume=False).execute_async("running totals")
    try:
        wait_for_totals(servers, totals, CUSTOMERS * half)
        savepoint = client.stop_with_savepoint(60)
    finally:
        with contextlib.suppress(JobCancelledError):
            client.wait(60)
    print(
        f"stopped with savepoint {savepoint.checkpoint_id} after "
        f"{len(read_committed_lines(servers, totals))} committed totals"
    )

    write_orders(servers, orders, range(half, ORDERS_PER_CUSTOMER))
    client = job(servers, orders, totals, work, parallelism=3, resume=True).execute_async("running totals, resumed")
    try:
        wait_for_totals(servers, totals, CUSTOMERS * ORDERS_PER_CUSTOMER)
        time.sleep(1.0)  # a duplicate would have been committed by now
    finally:
        client.cancel()
        with contextlib.suppress(JobCancelledError):
            client.wait(60)
    lines = read_committed_lines(servers, totals)
    seen = [tuple(int(part) for part in line.split(",")[:2]) for line in lines]
    expected = {(c, o) for c in range(CUSTOMERS) for o in range(ORDERS_PER_CUSTOMER)}
    exact = len(seen) == len(set(seen)) and set(seen) == expected
    print(f"{len(lines)} totals in {totals}; every order's total exactly once (read_committed): {exact}")
    return exact


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-servers", help="a Kafka cluster (default: start a local broker)")
    parser.add_argument("--work-dir", type=Path, default=None, help="checkpoints go here (default: a temp dir)")
    args = parser.parse_args(argv)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="flinklike-kafka-"))
    if args.bootstrap_servers:
        exact = run(args.bootstrap_servers, work)
    else:
        print("starting a local Kafka broker (the first run fetches its jars with Maven)")
        with LocalKafkaBroker() as broker:
            exact = run(broker.bootstrap_servers, work)
    if not exact:
        sys.exit(1)


if __name__ == "__main__":
    main()
