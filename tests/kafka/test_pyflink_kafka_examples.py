"""PyFlink's Kafka example programs (``pyflink/examples/datastream/connectors/kafka_*.py`` of the
apache-flink 2.3.0 wheel) run against a real broker with only their imports and bootstrap servers changed.

Each example writes a few records with a bounded job, then reads them back
with an endless job that prints what it reads: the test runs the program in a
subprocess, waits until every written record was printed, and then stops it
(as one stops the endless read job by hand).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("confluent_kafka")

from tests.compat.pyflink_sources import upstream_source, with_imports_changed  # noqa: E402
from tests.kafka.kafka_jobs import read_committed  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
WRITTEN = [(1, "hi"), (2, "hello"), (3, "hi"), (4, "hello"), (5, "hi"), (6, "hello"), (6, "hello")]


def program(name: str, servers: str, tmp_path: Path) -> Path:
    source = with_imports_changed(upstream_source(f"examples/datastream/connectors/{name}.py"))
    assert "localhost:9092" in source
    path = tmp_path / f"{name}.py"
    path.write_text(source.replace("localhost:9092", servers))
    return path


def run_until_printed(path: Path, expected_lines: int, *, timeout: float = 240) -> list[str]:
    """Run the program until it printed ``expected_lines`` record lines after "start reading"; then stop it."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    process = subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=path.parent, env=env)  # fmt: skip
    stderr: list[str] = []
    threading.Thread(target=lambda: stderr.extend(process.stderr), daemon=True).start()
    lines: list[str] = []
    reading = False
    deadline = time.monotonic() + timeout
    try:
        for line in process.stdout:
            line = line.rstrip("\n")
            if line.startswith("start reading"):
                reading = True
            elif reading and (line.startswith(("+I[", "(", "{", "Row(", "<Row")) or line.startswith("b'")):
                lines.append(line)
                if len(lines) >= expected_lines:
                    return lines
            if time.monotonic() > deadline:
                break
        raise AssertionError(
            f"{path.name} printed {len(lines)} of {expected_lines} records (exit code {process.poll()}):\n"
            f"{''.join(stderr)[-3000:]}"
        )
    finally:
        process.kill()
        process.wait(30)


def as_tuples(lines: list[str]) -> list[tuple]:
    """The printed Rows as tuples: ``+I[1,hi]`` (a Row of a declared ROW type, as PyFlink prints it; Java's
    ``Row.toString`` would write ``+I[1, hi]``), or a Python ``Row(...)`` (a stream without a declared type)."""
    from flinklike_spark.common import Row

    parsed = []
    for line in lines:
        if line.startswith("+I[") and line.endswith("]"):
            first, second = line[3:-1].split(",", 1)
            parsed.append((int(first), second.strip()))
        else:
            row = eval(line, {"Row": Row})  # noqa: S307 - a line our own subprocess printed
            parsed.append(tuple(row))
    return parsed


@pytest.mark.parametrize("name", ["kafka_json_format", "kafka_csv_format", "kafka_avro_format"])
def test_json_csv_and_avro_examples_write_then_read_their_rows(kafka_broker, tmp_path, name):
    lines = run_until_printed(program(name, kafka_broker.bootstrap_servers, tmp_path), len(WRITTEN))
    assert sorted(as_tuples(lines)) == sorted(WRITTEN)


def test_bytearray_example_writes_then_reads_its_json_documents(kafka_broker, tmp_path):
    lines = run_until_printed(program("kafka_bytearray_format", kafka_broker.bootstrap_servers, tmp_path), 3)
    assert sorted(json.loads(line)["id"] for line in lines) == [1, 2, 3]


def test_row_field_extractor_example_writes_keys_and_values(kafka_broker, tmp_path):
    path = program("kafka_row_field_extractor_example", kafka_broker.bootstrap_servers, tmp_path)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=240)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    records = read_committed(kafka_broker.bootstrap_servers, "row-extractor-example")
    events = sorted((key.decode(), json.loads(value)["type"]) for key, value, _ in records)
    assert events == [("user-001", "add_to_cart"), ("user-001", "purchase"), ("user-002", "view"),
                      ("user-003", "purchase")]  # fmt: skip
    printed = [line for line in done.stdout.splitlines() if line.startswith("Sending: User=")]
    assert len(printed) == 4, done.stdout[-2000:]
