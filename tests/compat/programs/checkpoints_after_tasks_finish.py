"""Checkpoints after tasks finished (FLIP-147): a short bounded source finishes at once, a slow one runs on.

With checkpointing, execute_and_collect hands out results only when a checkpoint completed. Flink 2 keeps
checkpointing the running part of the job after the short source finished, so results arrive while the
job runs, and its final checkpoint delivers the last ones before the job ends. (Before FLIP-147 the
finished source stopped checkpoints: every result came at the end.) The long input has 12000 records because
this runtime's from_collection emits batches of up to 4096 records, and a barrier falls between batches."""

import time

from pyflink.common import Types
from pyflink.datastream import StreamExecutionEnvironment

PAIR = Types.TUPLE([Types.STRING(), Types.INT()])


def slow(pair):
    if pair[1] % 100 == 0:
        time.sleep(0.05)  # 6 s over the 12000 records
    return pair


def main():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.enable_checkpointing(200)
    short = env.from_collection([("short", i) for i in range(5)], type_info=PAIR)
    long = env.from_collection([("long", i) for i in range(12_000)], type_info=PAIR).map(slow, output_type=PAIR)
    sums = short.union(long).key_by(lambda p: p[0], key_type=Types.STRING()).reduce(lambda a, b: (a[0], a[1] + b[1]))
    arrivals, last = [], {}
    with sums.execute_and_collect() as results:
        for key, total in results:
            arrivals.append(time.monotonic())
            last[key] = total
    print("results:", len(arrivals))
    print("totals:", sorted(last.items()))
    print("results arrived while the job ran:", arrivals[-1] - arrivals[0] > 1.0)


if __name__ == "__main__":
    main()
