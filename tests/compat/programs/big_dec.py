"""BIG_DEC values keep their scale in PyFlink (Java's BigDecimal): Decimal("1.50") comes back as 1.50 and
doubles to 3.00."""

from decimal import Decimal

from pyflink.common import Types
from pyflink.datastream import StreamExecutionEnvironment


def main():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    decimals = env.from_collection([Decimal("1.50"), Decimal("-0.125"), Decimal("1000")], type_info=Types.BIG_DEC())
    print("BIG_DEC:", [str(d) for d in decimals.execute_and_collect()])
    doubled = decimals.map(lambda d: d * 2, output_type=Types.BIG_DEC())
    print("BIG_DEC mapped:", [str(d) for d in doubled.execute_and_collect()])
    print("BIG_DEC equal:", [d == e for d, e in zip(doubled.execute_and_collect(), [3, Decimal("-0.25"), 2000])])


if __name__ == "__main__":
    main()
