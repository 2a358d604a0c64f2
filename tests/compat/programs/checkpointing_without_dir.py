"""env.enable_checkpointing(ms) and nothing else, as PyFlink programs do: Flink keeps the checkpoints in the
JobManager (jobmanager checkpoint storage) and the job runs; no checkpoint directory is configured."""

from pyflink.common import Types
from pyflink.datastream import StreamExecutionEnvironment


def main():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.enable_checkpointing(200)
    config = env.get_checkpoint_config()
    print("checkpointing:", config.is_checkpointing_enabled(), config.get_checkpoint_interval())
    words = "to be or not to be that is the question".split()
    pairs = env.from_collection([(w, 1) for w in words], type_info=Types.TUPLE([Types.STRING(), Types.INT()]))
    counts = pairs.key_by(lambda p: p[0], key_type=Types.STRING()).reduce(lambda a, b: (a[0], a[1] + b[1]))
    print("checkpointed reduce:", sorted(counts.execute_and_collect()))
    totals = pairs.key_by(lambda p: p[0], key_type=Types.STRING()).sum(1)
    print("checkpointed sum:", sorted(totals.execute_and_collect()))


if __name__ == "__main__":
    main()
