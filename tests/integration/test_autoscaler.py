"""The autoscaler on a real local cluster: a keyed job whose input rate triples scales up, catches up, and scales
back down once the rate drops, exactly once per key.

The source models a topic a producer writes to (``SequenceSource(arrival_rates=...)``): what arrived and was
not read is its backlog (``pendingRecords``). Each record costs the keyed stage 3 ms (a sleep: capacity
scales with subtasks, not with the machine's two cores), about 300 records/s per subtask. The job starts
at parallelism 1 on one TaskExecutor with ``slotmanager.number-of-slots.max: 4``:

- 100 records/s: one subtask keeps up (utilization about 0.35, but 1 is the lowest parallelism);
- 300 records/s: it cannot keep up, its backlog grows; the autoscaler scales the keyed stage up
  (TaskExecutors start for the new slots) and the job works the backlog off;
- 20 records/s: after ``job.autoscaler.scale-down.interval`` it scales back down and the TaskExecutors
  it no longer needs stop; then the job is cancelled.

How far it scales up depends on the machine's load (a busy machine makes each record dearer); the test
waits for a scale-down after the scale-ups, however many there were. Checkpoints come every 2 s: each one's
Delta commit is busy time of the sink's subtasks (one commits for its process, the others wait for it on their
task threads), and with 1 s checkpoints on a loaded CI machine that alone kept the keyed stage at parallelism 4
near 0.5 busy at 20 records/s, above the scale-down threshold.

Every key's ``seq`` must reach the keyed state and the Delta table exactly once and in order; the
decisions are in the REST API and in the Delta table ``<checkpoint dir>/scaling_decisions``.
"""

from __future__ import annotations

import pytest

from connectors import DeltaSink, SequenceSource, read_delta_table
from flinklike_spark import StreamExecutionEnvironment
from flinklike_spark.errors import ConfigurationError, JobCancelledError
from tests.support.delta_sink_job import InOrderPerKey, assert_prefix_exactly_once_in_order
from tests.support.rest_helpers import get, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(360)]

NUM_KEYS = 20
#: (seconds after the start, records per second): quiet, triple, low.
ARRIVALS = [(0, 100), (12, 300), (40, 20)]


def _environment(tmp_path, *, unaligned: bool, **extra) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment({
        "jobmanager.scheduler": "adaptive", "parallelism.default": 1, "local.number-taskmanager": 1,
        "taskmanager.numberOfTaskSlots": 1, "slotmanager.number-of-slots.max": 4, "restart-strategy.type": "none",
        "rest.port": 0, "execution.checkpointing.interval": "2s",
        "execution.checkpointing.dir": str(tmp_path / "chk"),
        "execution.checkpointing.unaligned.enabled": unaligned,
        "job.autoscaler.enabled": True, "autoscaler.standalone.control-loop.interval": "1s",
        "job.autoscaler.stabilization.interval": "2s", "job.autoscaler.metrics.window": "4s",
        "job.autoscaler.catch-up.duration": "20s", "job.autoscaler.restart.time": "2s",
        "job.autoscaler.scale-down.interval": "4s", **extra,
    })  # fmt: skip
    source = SequenceSource(num_keys=NUM_KEYS, records_per_key=None, arrival_rates=ARRIVALS)
    (
        env.from_source(source, name="topic").uid("topic")
        .key_by("key").process(InOrderPerKey(seconds_per_record=0.003)).uid("check")
        .sink_to(DeltaSink(tmp_path / "out")).uid("delta")
    )  # fmt: skip
    return env


@pytest.mark.parametrize("unaligned", [False, True], ids=["aligned", "unaligned"])
def test_a_job_whose_input_triples_scales_up_catches_up_and_scales_down_exactly_once(tmp_path, unaligned):
    client = _environment(tmp_path, unaligned=unaligned).execute_async("autoscaled")
    base, job_id = client.web_interface_url, client.job_id

    def scaled_down():
        scaled = [r["cause"].split(":")[1].strip() for r in get(f"{base}/jobs/{job_id}/rescales")["rescales"]]
        return "scale up" in scaled and scaled[-1] == "scale down"

    try:
        wait_for("a scale-up and then a scale-down", scaled_down, timeout=200, interval=0.5)
    except AssertionError as e:
        raise AssertionError(f"{e}; the autoscaler: {get(f'{base}/jobs/{job_id}/autoscaler')}") from None
    autoscaler, rescales = get(f"{base}/jobs/{job_id}/autoscaler"), get(f"{base}/jobs/{job_id}/rescales")
    client.cancel()
    with pytest.raises(JobCancelledError):
        client.wait(60)

    assert_prefix_exactly_once_in_order(tmp_path / "out", num_keys=NUM_KEYS)
    decisions = autoscaler["decisions"]
    assert decisions[0]["reason"].startswith("scale up") and all(d["applied"] for d in decisions), decisions
    assert rescales["numFailures"] == 0, rescales["lastFailure"]
    causes = [r["cause"] for r in rescales["rescales"]]
    assert all(c.startswith("autoscaler: ") for c in causes), causes
    widest = max(max(r["parallelismAfter"].values()) for r in rescales["rescales"])
    assert widest >= 2
    assert max(rescales["rescales"][-1]["parallelismAfter"].values()) < widest  # scaled back down
    table = read_delta_table(tmp_path / "chk" / "scaling_decisions").to_pylist()
    assert {r["decision_id"] for r in table} == {d["id"] for d in decisions}
    assert {r["job_id"] for r in table} == {job_id}
    up = [r for r in table if r["decision_id"] == 1 and r["new_parallelism"] > r["current_parallelism"]]
    assert up and all(r["true_processing_rate"] < r["target_rate"] / 0.7 + r["catch_up_rate"] for r in up)


def test_the_autoscaler_needs_the_adaptive_scheduler(tmp_path):
    env = _environment(tmp_path, unaligned=False, **{"jobmanager.scheduler": "default"})
    with pytest.raises(ConfigurationError, match="jobmanager.scheduler: adaptive"):
        env.execute_async("refused")
