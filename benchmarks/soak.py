"""Issue 42 item 2: a soak run. A keyed job runs for ``--minutes`` through kills and stop-with-savepoint/resumes.

The job: ``SequenceSource`` (``--keys`` keys at ``--rate`` rows/s, bounded so
that it ends near the planned duration) -> ``key_by`` -> a keyed function that
checks each key's chain (RocksDB state, incremental checkpoints every 200 ms)
-> a ``DeltaSink`` and an exactly-once ``KafkaSink`` (a local KRaft broker).
The sink's table is created first with ``--sink-log-retention`` as its
``delta.logRetentionDuration``, as docs/checkpoints.md tells a user whose sink
commits several times a second ("" keeps Delta's default of 30 days).
Every ``--kill-every`` minutes a TaskExecutor is SIGKILLed; every
``--savepoint-every`` minutes the job is stopped with a savepoint and resumed
from it. Every ``--sample-every`` seconds the RSS, threads and open files of
every TaskExecutor and of this process are sampled, with the median duration
of the checkpoints completed since the last sample (Flink's REST history).

At the end both outputs are checked per key: every ``seq`` once, in order in
Kafka (a ``read_committed`` consumer), with the state chain unbroken. The
report compares the last sixth of the run (the last 10 minutes of 60) with the
span from 1/12 to 1/4 (minutes 5-15): target, each within 1.2x. With
``--plot PNG`` the samples are drawn with matplotlib.

    PYTHONPATH=.:benchmarks python3 benchmarks/soak.py [--minutes 60] [--kill-every 5] [--savepoint-every 20]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import random
import shutil
import signal
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil
import pyarrow as pa
from deltalake import DeltaTable
from quiet import QuietWatch

from connectors import DeltaSink, SequenceSource, read_delta_table
from connectors.delta import CREATED_TABLE_CONFIGURATION
from connectors.kafka.testing import LocalKafkaBroker
from flinklike_spark import KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor
from flinklike_spark.common.serialization import SimpleStringSchema
from flinklike_spark.common.typeinfo import Types
from flinklike_spark.datastream.connectors.kafka import DeliveryGuarantee, KafkaRecordSerializationSchema, KafkaSink
from flinklike_spark.errors import CheckpointFailedError, JobCancelledError
from tests.kafka.kafka_jobs import KeyOfLine, read_committed
from tests.support.failover_jobs import task_executor_processes

OUTPUT = pa.schema([("key", pa.int64()), ("seq", pa.int64()), ("count", pa.int64())])


class ChainCheck(KeyedProcessFunction):
    """Per key: the n-th record must have ``seq == n`` (state restored across every kill and resume)."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        seen = self.count.value() or 0
        if value["seq"] != seen:
            raise AssertionError(f"key {value['key']}: got seq {value['seq']} after {seen} records")
        self.count.update(seen + 1)
        yield {"key": value["key"], "seq": value["seq"], "count": seen + 1}


@dataclasses.dataclass(frozen=True)
class Sample:
    """One sample: seconds since the start, summed over the TaskExecutors, and this (the JobMaster's) process."""

    at: float
    te_rss_mb: float
    te_threads: int
    te_fds: int
    jm_rss_mb: float
    jm_threads: int
    jm_fds: int
    checkpoint_ms: float | None


@dataclasses.dataclass
class SoakResult:
    samples: list[Sample]
    kills: int
    savepoints: int
    records: int


def build(config: dict, servers: str, topic: str, delta: str, *, keys: int, per_key: int, rate: float):
    env = StreamExecutionEnvironment.get_execution_environment(config)
    checked = (
        env.from_source(SequenceSource(num_keys=keys, records_per_key=per_key, rows_per_second=rate), name="seq")
        .uid("seq")
        .key_by("key")
        .process(ChainCheck(), output_type=OUTPUT)
        .uid("chain")
    )
    checked.sink_to(DeltaSink(delta)).uid("delta")
    sink = (
        KafkaSink.builder()
        .set_bootstrap_servers(servers)
        .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
        .set_record_serializer(
            KafkaRecordSerializationSchema.builder()
            .set_topic(topic)
            .set_key_serialization_schema(KeyOfLine())
            .set_value_serialization_schema(SimpleStringSchema())
            .build()
        )
        .build()
    )
    lines = checked.map(lambda r: f"{r['key']},{r['seq']},{r['count']}", output_type=Types.STRING()).uid("line")
    lines.sink_to(sink).uid("kafka")
    return env


def _process_usage(process: psutil.Process) -> tuple[float, int, int]:
    with process.oneshot():
        return process.memory_info().rss / 2**20, process.num_threads(), process.num_fds()


def _checkpoint_ms(client, since_id: int) -> tuple[float | None, int]:
    """The median end-to-end duration of the checkpoints completed after ``since_id``, and the newest id."""
    try:
        url = f"{client.web_interface_url}/jobs/{client.job_id}/checkpoints"
        with urllib.request.urlopen(url, timeout=10) as response:
            history = json.load(response).get("history", [])
    except (OSError, ValueError):
        return None, since_id
    done = [h for h in history if h.get("status") == "COMPLETED" and h["id"] > since_id]
    if not done:
        return None, since_id
    return statistics.median(h["end_to_end_duration"] for h in done), max(h["id"] for h in done)


def sample(started: float, client, since_id: int) -> tuple[Sample, int]:
    te = [0.0, 0, 0]
    for process in task_executor_processes():
        with contextlib.suppress(psutil.Error):
            for i, value in enumerate(_process_usage(process)):
                te[i] += value
    jm = _process_usage(psutil.Process())
    checkpoint_ms, since_id = _checkpoint_ms(client, since_id)
    return Sample(time.monotonic() - started, te[0], te[1], te[2], jm[0], jm[1], jm[2], checkpoint_ms), since_id


def run_soak(
    *, minutes: float, kill_every: float, savepoint_every: float, sample_every: float, keys: int, rate: float,
    work: Path, sink_log_retention: str = "", log=print,
) -> SoakResult:  # fmt: skip
    """Run the soak; raise AssertionError if an output lost, duplicated or reordered a record."""
    per_key = max(1, int(rate * minutes * 60 / keys))
    with LocalKafkaBroker(data_dir=work / "broker") as broker:
        topic = broker.create_topic("soak", partitions=4)
        delta, checkpoints = str(work / "delta"), str(work / "checkpoints")
        if sink_log_retention:
            retention = {"delta.logRetentionDuration": sink_log_retention}
            DeltaTable.create(delta, OUTPUT, configuration=dict(CREATED_TABLE_CONFIGURATION) | retention)
        config = {
            "parallelism.default": 2,
            "local.number-taskmanager": 2,
            "state.backend.type": "rocksdb",
            "execution.checkpointing.incremental": True,
            "execution.checkpointing.interval": "200ms",
            "execution.checkpointing.dir": checkpoints,
            "restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": 1000,
            "restart-strategy.fixed-delay.delay": "500 ms",
        }

        def start(extra: dict):
            return build(
                config | extra, broker.bootstrap_servers, topic, delta, keys=keys, per_key=per_key, rate=rate
            ).execute_async("soak")

        started = time.monotonic()
        client = start({})
        samples: list[Sample] = []
        kills = savepoints = 0
        since_id = 0
        # savepoints half a kill interval after a kill: a savepoint while the job restarts fails (it is retried)
        next_sample, next_kill = sample_every, kill_every * 60
        next_savepoint = savepoint_every * 60 + kill_every * 30
        while not client.done():
            time.sleep(0.2)
            now = time.monotonic() - started
            if now >= next_sample:
                taken, since_id = sample(started, client, since_id)
                samples.append(taken)
                with (work / "samples.jsonl").open("a") as f:  # kept by a run that fails
                    f.write(json.dumps(dataclasses.asdict(taken)) + "\n")
                log(f"{taken.at:7.0f} s  TaskExecutors {taken.te_rss_mb:7.0f} MB {taken.te_threads:4d} threads "
                    f"{taken.te_fds:4d} fds  JobMaster {taken.jm_rss_mb:6.0f} MB {taken.jm_threads:4d} threads "
                    f"{taken.jm_fds:4d} fds  checkpoint p50 {taken.checkpoint_ms} ms")  # fmt: skip
                next_sample += sample_every
            if now >= next_kill and now < minutes * 60:
                victims = task_executor_processes()
                if victims:
                    random.choice(victims).send_signal(signal.SIGKILL)
                    kills += 1
                    log(f"{now:7.0f} s  SIGKILLed a TaskExecutor ({kills})")
                next_kill += kill_every * 60
            if now >= next_savepoint and now < minutes * 60:
                try:
                    path = client.stop_with_savepoint(timeout=120).path
                except CheckpointFailedError as e:  # the job restarts (a kill): try again in 10 s
                    log(f"{now:7.0f} s  stop-with-savepoint failed, retried in 10 s: {e}")
                    next_savepoint += 10
                    continue
                with contextlib.suppress(JobCancelledError):
                    client.wait(120)
                savepoints += 1
                log(f"{now:7.0f} s  stopped with savepoint {path}; resuming")
                client = start({"execution.state-recovery.path": path})
                since_id = 0
                next_savepoint += savepoint_every * 60
        client.wait(60)
        check_outputs(
            read_delta_table(delta).to_pylist(), read_committed(broker.bootstrap_servers, topic), keys, per_key
        )
        return SoakResult(samples=samples, kills=kills, savepoints=savepoints, records=keys * per_key)


def check_outputs(delta_rows: list[dict], kafka_records: list, keys: int, per_key: int) -> None:
    expected = list(range(per_key))
    per_key_delta: dict[int, list[int]] = {}
    for row in delta_rows:
        assert row["count"] == row["seq"] + 1, f"Delta: key {row['key']} seq {row['seq']} count {row['count']}"
        per_key_delta.setdefault(row["key"], []).append(row["seq"])
    assert sorted(per_key_delta) == list(range(keys)), f"Delta: keys {sorted(per_key_delta)[:10]}"
    for key, seqs in per_key_delta.items():
        assert sorted(seqs) == expected, f"Delta: key {key}: {len(seqs)} rows, {len(seqs) - len(set(seqs))} twice"
    per_key_kafka: dict[int, list[int]] = {}
    for _, value, _ in kafka_records:
        key, seq, count = (int(part) for part in value.decode().split(","))
        assert count == seq + 1, f"Kafka: key {key} seq {seq} count {count}"
        per_key_kafka.setdefault(key, []).append(seq)
    assert sorted(per_key_kafka) == list(range(keys)), f"Kafka: keys {sorted(per_key_kafka)[:10]}"
    for key, seqs in per_key_kafka.items():
        assert seqs == expected, f"Kafka: key {key}: {len(seqs)} records, in order: {seqs == sorted(seqs)}"


def growth(samples: list[Sample], minutes: float) -> dict[str, float | None]:
    """Each measure's median over the last sixth of the run against its median from 1/12 to 1/4 of it."""
    span = minutes * 60
    early = [s for s in samples if span / 12 <= s.at <= span / 4]
    late = [s for s in samples if s.at >= span * 5 / 6]
    ratios: dict[str, float | None] = {}
    for name in ("te_rss_mb", "te_threads", "te_fds", "jm_rss_mb", "jm_threads", "jm_fds", "checkpoint_ms"):
        a = [getattr(s, name) for s in early if getattr(s, name) is not None]
        b = [getattr(s, name) for s in late if getattr(s, name) is not None]
        ratios[name] = statistics.median(b) / statistics.median(a) if a and b and statistics.median(a) else None
    return ratios


def plot(samples: list[Sample], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = [s.at / 60 for s in samples]
    figure, axes = plt.subplots(4, 1, figsize=(8, 10), sharex=True)
    for ax, (label, te, jm) in zip(
        axes,
        [("RSS (MB)", "te_rss_mb", "jm_rss_mb"), ("threads", "te_threads", "jm_threads"), ("open files", "te_fds", "jm_fds")],
        strict=False,
    ):  # fmt: skip
        ax.plot(minutes, [getattr(s, te) for s in samples], label="TaskExecutors")
        ax.plot(minutes, [getattr(s, jm) for s in samples], label="JobMaster process")
        ax.set_ylabel(label)
        ax.legend()
    axes[3].plot(minutes, [s.checkpoint_ms for s in samples], ".")
    axes[3].set_ylabel("checkpoint p50 (ms)")
    axes[3].set_xlabel("minutes")
    figure.tight_layout()
    figure.savefig(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--kill-every", type=float, default=5, help="minutes between SIGKILLs")
    parser.add_argument("--savepoint-every", type=float, default=20, help="minutes between stop/resume")
    parser.add_argument("--sample-every", type=float, default=60, help="seconds between samples")
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--rate", type=float, default=2_000, help="rows per second")
    parser.add_argument("--plot", help="write the samples as a PNG here")
    parser.add_argument(
        "--sink-log-retention", default="interval 2 minutes",
        help="the DeltaSink table's delta.logRetentionDuration ('' for Delta's default, 30 days)",
    )  # fmt: skip
    parser.add_argument(
        "--work", help="the run's directory (broker, checkpoints, outputs), kept; default: a temporary one, "
        "deleted after a run that passed and kept (its path printed) after one that failed",
    )  # fmt: skip
    args = parser.parse_args()
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="soak-"))
    work.mkdir(parents=True, exist_ok=True)
    with QuietWatch() as quiet:
        try:
            result = run_soak(
                minutes=args.minutes, kill_every=args.kill_every, savepoint_every=args.savepoint_every,
                sample_every=args.sample_every, keys=args.keys, rate=args.rate, work=work,
                sink_log_retention=args.sink_log_retention,
            )  # fmt: skip
        except BaseException:
            print(f"the soak failed; its directory is kept: {work}", flush=True)
            raise
        print(f"\n{result.records} records exactly once in Delta and Kafka through {result.kills} SIGKILLs and "
              f"{result.savepoints} stop-with-savepoint/resumes (pid {os.getpid()})")  # fmt: skip
        for name, ratio in growth(result.samples, args.minutes).items():
            if ratio is not None:
                quiet.target(f"  {name:14s} last sixth / 1/12..1/4: {ratio:.2f}x (target <= 1.2x)", ratio <= 1.2)
    quiet.report()
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    if args.plot:
        plot(result.samples, args.plot)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
