"""What the runtime writes to Delta is readable with Spark SQL and delta-spark.

A keyed job with checkpointing writes its output with DeltaSink; Spark then
reads the output table (every ``seq`` per key exactly once) and queries the
checkpoint tables (history and readable keyed state) with SQL.
"""

from __future__ import annotations

import pytest

from connectors import DeltaSink, SequenceSource
from flinklike_spark import StreamExecutionEnvironment
from tests.spark.pipelines import Count

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(600)]

NUM_KEYS = 6
RECORDS_PER_KEY = 500


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    base = tmp_path_factory.mktemp("delta")
    checkpoints, output = base / "checkpoints", base / "out"
    env = StreamExecutionEnvironment.get_execution_environment(
        {
            "parallelism.default": 2,
            "execution.checkpointing.interval": "100ms",
            "execution.checkpointing.dir": str(checkpoints),
            "execution.checkpointing.num-retained": 100,
        }
    )
    (
        env.from_source(
            SequenceSource(num_keys=NUM_KEYS, records_per_key=RECORDS_PER_KEY, rows_per_second=3_000), name="seq"
        )
        .uid("seq")
        .key_by("key")
        .process(Count())
        .uid("counter")
        .sink_to(DeltaSink(output))
        .uid("delta-out")
    )
    result = env.execute("spark reads delta")
    return result.job_id, checkpoints, output


def test_spark_reads_the_sink_output_exactly_once(spark, written):
    _, _, output = written
    df = spark.read.format("delta").load(str(output))
    df.createOrReplaceTempView("out")
    rows = spark.sql(
        "SELECT key, count(*) AS n, count(DISTINCT seq) AS distinct_seq, min(seq) AS lo, max(seq) AS hi, "
        "max(count) AS final_count FROM out GROUP BY key ORDER BY key"
    ).collect()
    assert [r.asDict() for r in rows] == [
        {
            "key": k,
            "n": RECORDS_PER_KEY,
            "distinct_seq": RECORDS_PER_KEY,
            "lo": 0,
            "hi": RECORDS_PER_KEY - 1,
            "final_count": RECORDS_PER_KEY,
        }
        for k in range(NUM_KEYS)
    ]
    history = spark.sql(f"DESCRIBE HISTORY delta.`{output}`").collect()
    assert len(history) >= 2, "expected commits at checkpoints before the final commit"


def test_spark_sql_queries_checkpoint_history_and_keyed_state(spark, written):
    job_id, checkpoints, _ = written
    history = spark.sql(
        f"SELECT checkpoint_id, kind, mode FROM delta.`{checkpoints}/checkpoints` "
        f"WHERE job_id = '{job_id}' ORDER BY checkpoint_id"
    ).collect()
    assert history and {r.kind for r in history} == {"checkpoint"} and {r.mode for r in history} == {"aligned"}
    latest = history[-1].checkpoint_id
    state = spark.sql(
        f"SELECT subtask, key_group, key_repr, CAST(value_repr AS INT) AS stored_count "
        f"FROM delta.`{checkpoints}/operator_state` "
        f"WHERE job_id = '{job_id}' AND checkpoint_id = {latest} AND operator_uid = 'counter' "
        f"AND state_name = 'count' ORDER BY key_repr"
    ).collect()
    assert sorted(int(r.key_repr) for r in state) == list(range(NUM_KEYS))
    assert all(0 < r.stored_count <= RECORDS_PER_KEY for r in state)
    assert {r.subtask for r in state} <= {0, 1}
