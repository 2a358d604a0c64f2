"""Environment and stream API: getters of the environment, stream names, get_execution_plan (its JSON,
operator by operator), execute_async with JobClient.get_job_execution_result().result(), add_python_file,
KeyedStream's partitioning methods raising as in PyFlink, and a keyed stream connected with a non-keyed
one and then keyed on both sides."""

import json
import os
import tempfile

from pyflink.common import Types
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.functions import CoMapFunction, MapFunction


class Remember(MapFunction):
    """Writes each value to a file of the directory it is given (to read back after execute_async)."""

    def __init__(self, directory):
        self.directory = directory

    def map(self, value):
        with open(os.path.join(self.directory, str(value)), "w") as out:
            out.write(str(value * value))
        return value


class Tag(CoMapFunction):
    def map1(self, value):
        return "left", value

    def map2(self, value):
        return "right", value


def plan_lines(env):
    plan = json.loads(env.get_execution_plan())
    names = {node["id"]: node["contents"].split(", _stream_key_by_map_operator")[0] for node in plan["nodes"]}
    lines = []
    for node in plan["nodes"]:
        inputs = sorted((names[p["id"]], p["ship_strategy"]) for p in node.get("predecessors", []))
        lines.append((names[node["id"]], node["pact"], node["parallelism"], inputs))
    return sorted(plan), sorted(lines)


def main():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    print("parallelism:", env.get_parallelism(), "max parallelism:", env.get_max_parallelism())
    print(
        "chaining:",
        env.is_chaining_enabled(),
        "checkpointing:",
        env.get_checkpointing_mode(),
        env.get_checkpoint_interval(),
    )
    env.enable_checkpointing(60000)
    print("checkpointing enabled:", env.get_checkpointing_mode(), env.get_checkpoint_interval())
    env.set_max_parallelism(64)
    print("max parallelism set:", env.get_max_parallelism())

    numbers = env.from_collection([1, 2, 3, 4], type_info=Types.INT()).name("numbers")
    plus = numbers.map(lambda x: x + 1, output_type=Types.INT()).name("plus one")
    keyed = plus.key_by(lambda x: x % 2, key_type=Types.INT())
    keyed.reduce(lambda a, b: a + b).name("sum").print()
    print("names:", numbers.get_name(), plus.get_name())
    print(
        "default names:",
        [
            env.from_collection([1]).get_name(),
            numbers.map(lambda x: x).get_name(),
            numbers.filter(lambda x: x).get_name(),
            keyed.reduce(lambda a, b: a).get_name(),
        ],
    )
    keys, lines = plan_lines(env)
    print("plan keys:", keys)
    for line in lines:
        print("plan node:", line)

    for method in ["rebalance", "shuffle", "rescale", "forward", "broadcast"]:
        try:
            getattr(keyed, method)()
            print(f"KeyedStream.{method}: allowed")
        except Exception as error:  # PyFlink raises a plain Exception
            print(
                f"KeyedStream.{method}: raised an Exception: {isinstance(error, Exception)};",
                str(error).split(" (")[0].rstrip("."),
            )

    with tempfile.TemporaryDirectory() as directory:
        module = os.path.join(directory, "compat_helper_module.py")
        with open(module, "w") as out:
            out.write("def triple(x):\n    return 3 * x\n")
        env2 = StreamExecutionEnvironment.get_execution_environment()
        env2.set_parallelism(1)
        env2.add_python_file(module)
        tripled = env2.from_collection([1, 2], type_info=Types.INT()).map(
            lambda x: __import__("compat_helper_module").triple(x), output_type=Types.INT()
        )
        print("add_python_file:", sorted(tripled.execute_and_collect()))

        out_dir = os.path.join(directory, "out")
        os.mkdir(out_dir)
        env3 = StreamExecutionEnvironment.get_execution_environment()
        env3.set_parallelism(1)
        env3.from_collection([5, 6, 7], type_info=Types.INT()).map(Remember(out_dir), output_type=Types.INT())
        client = env3.execute_async("async job")
        result = client.get_job_execution_result().result()
        print("job id matches:", str(result.get_job_id()) == str(client.get_job_id()))
        print("written:", sorted((name, open(os.path.join(out_dir, name)).read()) for name in os.listdir(out_dir)))

    env4 = StreamExecutionEnvironment.get_execution_environment()
    env4.set_parallelism(2)
    left = env4.from_collection([1, 2, 3], type_info=Types.INT()).key_by(lambda x: x % 2, key_type=Types.INT())
    right = env4.from_collection([10, 11], type_info=Types.INT())
    tagged = (
        left.connect(right)
        .key_by(lambda x: x % 2, lambda y: y % 2, key_type=Types.INT())
        .map(Tag(), output_type=Types.TUPLE([Types.STRING(), Types.INT()]))
    )
    print("connected:", sorted(tagged.execute_and_collect()))


if __name__ == "__main__":
    main()
