"""Task deployments unpickled on several RPC threads at once in a fresh TaskExecutor
process must not deadlock on Python's module import locks (issue 9 item 12).

Unpickling a deployment imports the modules its functions, sources and sinks live in.
Two threads starting to import the ``connectors`` package from two different
submodules (``connectors.files`` and ``connectors.collect``) each hold one module
lock and wait for the other's, and Python raises ``_DeadlockError: deadlock detected
by _ModuleLock('connectors.files')``. In a real cluster the window is a few
milliseconds (about one small job in thirty); the child interpreter here widens it
with a meta-path finder that is slow to *find* ``connectors``, which changes nothing
but timing, so that every run without the fix hits the deadlock.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap

import cloudpickle
import pytest

from connectors import CollectSink, DeltaSink, FileSink, FileSource, PrintSink, SequenceSource
from flinklike_spark import Configuration, StreamExecutionEnvironment
from flinklike_spark._runtime.deployment import TaskDeploymentDescriptor
from flinklike_spark._runtime.gateways import SubmitTask

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

PAYLOADS_PER_PROCESS = 8
FRESH_PROCESSES = 3

CHILD = textwrap.dedent(
    """
    import pickle, sys, threading, time
    import pyarrow.flight as flight
    from flinklike_spark._runtime.gateways import SubmitTask
    from flinklike_spark._runtime.rpc import FlightNode, auth_token, call_options, generate_secret, rpc_name

    class SlowToFindConnectors:
        # Widens the window between "a thread starts importing the package" and "the
        # package is in sys.modules" from microseconds to 300 ms; finds nothing itself.
        def find_spec(self, name, path=None, target=None):
            if name == "connectors":
                time.sleep(0.3)
            return None

    sys.meta_path.insert(0, SlowToFindConnectors())
    with open(sys.argv[1], "rb") as f:
        payloads = pickle.load(f)  # a list of bytes: nothing of connectors is imported yet
    assert "connectors" not in sys.modules

    secret = generate_secret()
    node = FlightNode(secret)
    node.register_handler(SubmitTask, lambda message: message.descriptor.task_name)
    node.start()
    barrier = threading.Barrier(len(payloads))
    answers, errors = [], []

    def submit(payload):
        client = flight.FlightClient(node.address)
        barrier.wait()
        [result] = client.do_action(flight.Action(rpc_name(SubmitTask), payload), call_options(auth_token(secret), 60))
        body = result.body.to_pybytes()
        if body[:1] == b"\\x00":
            answers.append(pickle.loads(body[1:]))
        else:
            errors.append(pickle.loads(body[1:])["message"])

    threads = [threading.Thread(target=submit, args=(p,)) for p in payloads]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    node.shutdown()
    print(sorted(answers))
    print(errors)
    """
)


def deployment_payloads(count: int) -> list[bytes]:
    """``count`` pickled task deployments whose sources and sinks come from different connectors modules."""
    sources = [SequenceSource(num_keys=1, records_per_key=1), FileSource("/tmp/in.jsonl")]
    sinks = [CollectSink("out"), FileSink("/tmp/out"), DeltaSink("/tmp/table"), PrintSink()]
    payloads = []
    for i in range(count):
        env = StreamExecutionEnvironment.get_execution_environment({"parallelism.default": 1})
        env.from_source(sources[i % 2]).map(lambda row: row).sink_to(sinks[i % len(sinks)])
        [vertex] = env.get_job_graph(f"job {i}")
        tdd = TaskDeploymentDescriptor(
            job_id=f"job{i}", job_name=f"job {i}", execution_id=f"e{i}", vertex_id=vertex.id,
            task_name=f"task {i}", subtask_index=0, parallelism=1, max_parallelism=128, attempt_number=0,
            allocation_id=f"a{i}", operators=vertex.operators, input_gates=(), result_partitions=(), splits=(),
            config=Configuration(),
        )  # fmt: skip
        payloads.append(
            cloudpickle.dumps(SubmitTask(descriptor=tdd))
        )  # neighbours start from different connectors modules
    return payloads


def test_concurrent_task_deployments_in_fresh_processes_do_not_deadlock(tmp_path):
    payload_file = tmp_path / "payloads.pickle"
    payload_file.write_bytes(pickle.dumps(deployment_payloads(PAYLOADS_PER_PROCESS)))
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    expected = sorted(f"task {i}" for i in range(PAYLOADS_PER_PROCESS))
    for _ in range(FRESH_PROCESSES):
        done = subprocess.run(
            [sys.executable, str(script), str(payload_file)], capture_output=True, text=True, timeout=90
        )
        assert done.returncode == 0, done.stderr
        answers, errors = done.stdout.strip().splitlines()
        assert errors == "[]", errors  # before the fix: "_DeadlockError: deadlock detected by _ModuleLock(...)"
        assert answers == repr(expected)
