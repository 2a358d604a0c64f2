"""PyFlink's runner (its own venv, its python first on PATH):
``python engine_pyflink.py W2 --records N --keys K --parallelism P --mode thread|process``.

W2 is the DataStream API: NumberSequenceSource -> key_by(Python key selector)
-> KeyedProcessFunction with ValueState. W2v is Flink SQL's native tumbling
window count over the datagen sequence connector (the JVM does the work: the
built-ins; ``rows-per-second`` lifted from the connector's default of 10,000).
W1 has no vectorized DataStream operator in PyFlink and is not run. W4
(recovery) is in ``scenarios_pyflink.py``.
Two times, of a second job in the process (a small first job starts the JVM
and its gateway): the *wall* time from ``execute`` to the last result
collected (the embedded MiniCluster PyFlink starts per job included), and the
*busy* time, Flink's net runtime of the job (``JobExecutionResult``: from the
job's start on the cluster to its end, deployment of its tasks included).
"""

from __future__ import annotations

import argparse
import faulthandler
import time

from workloads import WINDOW_MS, per_key, print_result


def run_w2(records: int, keys: int, parallelism: int, mode: str) -> tuple[float, float, dict]:
    from py4j.java_gateway import get_field
    from pyflink.common import Configuration, Types, WatermarkStrategy
    from pyflink.datastream import KeyedProcessFunction, StreamExecutionEnvironment
    from pyflink.datastream.connectors.number_seq import NumberSequenceSource
    from pyflink.datastream.data_stream import CloseableIterator
    from pyflink.datastream.state import ValueStateDescriptor
    from pyflink.java_gateway import get_gateway

    m = per_key(records, keys)

    class CountUntil(KeyedProcessFunction):
        def open(self, runtime_context):
            self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

        def process_element(self, value, ctx):
            current = (self.count.value() or 0) + 1
            self.count.update(current)
            if current == m:
                yield ctx.get_current_key(), current

    config = Configuration()
    config.set_string("python.execution-mode", mode)
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.set_parallelism(parallelism)
    source = env.from_source(NumberSequenceSource(0, records - 1), WatermarkStrategy.no_watermarks(), "seq")
    counts = source.key_by(lambda i: i % keys, key_type=Types.LONG()).process(
        CountUntil(), output_type=Types.TUPLE([Types.LONG(), Types.LONG()])
    )
    started = time.perf_counter()
    # execute_and_collect() as PyFlink 2.3 runs it, through the Java call that also returns the job's client
    get_gateway().jvm.org.apache.flink.python.util.PythonConfigUtil.configPythonOperator(
        counts._j_data_stream.getExecutionEnvironment()
    )
    counts._apply_chaining_optimization()
    client_and_iterator = counts._j_data_stream.executeAndCollectWithClient("W2")
    rows = total = 0
    with CloseableIterator(get_field(client_and_iterator, "iterator"), counts.get_type()) as results:
        for _key, count in results:
            rows += 1
            total += count
    wall = time.perf_counter() - started
    net_ms = get_field(client_and_iterator, "client").getJobExecutionResult().get().getNetRuntime()
    return net_ms / 1000, wall, {"rows": rows, "sum": total}


def run_w2v(records: int, keys: int, parallelism: int, mode: str) -> tuple[float, float, dict]:
    from pyflink.table import EnvironmentSettings, TableEnvironment

    per_key(records, keys)
    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    t_env.get_config().set("parallelism.default", str(parallelism))
    t_env.get_config().set("python.execution-mode", mode)
    t_env.execute_sql(f"""
        CREATE TABLE seq (
            i BIGINT,
            k AS i % {keys},
            ts AS TO_TIMESTAMP_LTZ(i / {keys}, 3),
            WATERMARK FOR ts AS ts
        ) WITH ('connector' = 'datagen', 'fields.i.kind' = 'sequence',
                'fields.i.start' = '0', 'fields.i.end' = '{records - 1}', 'rows-per-second' = '1000000000')
    """)
    table = t_env.sql_query(f"""
        SELECT k, window_start, COUNT(*) AS c
        FROM TABLE(TUMBLE(TABLE seq, DESCRIPTOR(ts), INTERVAL '{WINDOW_MS / 1000:g}' SECOND))
        GROUP BY k, window_start, window_end
    """)
    started = time.perf_counter()
    result = table.execute()
    rows = total = 0
    with result.collect() as results:
        for row in results:
            rows += 1
            total += row[2]
    wall = time.perf_counter() - started
    net_ms = result.get_job_client().get_job_execution_result().result().get_net_runtime()
    return net_ms / 1000, wall, {"rows": rows, "sum": total}


def main() -> None:
    faulthandler.enable(all_threads=True)  # a native crash (SIGSEGV) leaves every thread's stack on stderr
    parser = argparse.ArgumentParser()
    parser.add_argument("workload")
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--parallelism", type=int, default=1)
    parser.add_argument("--mode", choices=["thread", "process"], default="process")
    parser.add_argument("--rate", type=float, default=2000.0, help="W4: records per second the job is paced at")
    args = parser.parse_args()
    if args.workload == "W4":
        import scenarios_pyflink

        seconds, summary, metrics = scenarios_pyflink.run_w4(args.records, args.keys, args.parallelism, rate=args.rate)
        print_result(seconds, summary, metrics=metrics)
        return
    runners = {"W2": run_w2, "W2v": run_w2v}
    if args.workload not in runners:
        raise SystemExit(f"pyflink: workload {args.workload!r} is not run (runs: {sorted(runners)})")
    # A first, small job starts the JVM and its gateway in this process; the timed job then pays only its
    # own deployment, as flinklike-spark's time excludes its cluster's start-up.
    runners[args.workload](args.keys * 10, args.keys, args.parallelism, args.mode)
    busy, wall, summary = runners[args.workload](args.records, args.keys, args.parallelism, args.mode)
    print_result(busy, summary, wall_seconds=wall, mode=args.mode)


if __name__ == "__main__":
    main()
