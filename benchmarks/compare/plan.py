"""The comparison's plan: engines, workloads' sizes, the settings each engine is swept over, and the
records of what ran (``Variant``, ``Outcome``). Shared by ``run.py`` (runs) and ``report.py`` (tables).
"""

from __future__ import annotations

import dataclasses

#: the engines; "flinklike-parquet" is flinklike-spark reading the shared Parquet files Spark reads
ENGINES = ("flinklike", "flinklike-parquet", "bytewax", "pyflink", "spark")
#: the script each engine runs (``engine_<script>.py``) and the arguments that select it
ENGINE_SCRIPT = {"flinklike-parquet": "flinklike"}
KEYS = 1000

#: records per run: (full, quick) per workload and engine. Every engine reads the same records (row i:
#: key i % 1000, seq i // 1000); sizes are equal where the run stays within about a minute, and
#: otherwise the first N of them (the slower peers), large enough that start-up is a small share.
RECORDS = {
    "W1": {"flinklike": (50_000_000, 2_000_000), "flinklike-parquet": (50_000_000, 2_000_000),
           "bytewax": (50_000_000, 2_000_000), "spark": (50_000_000, 200_000)},
    "W2": {"flinklike": (5_000_000, 500_000), "flinklike-parquet": (5_000_000, 500_000),
           "bytewax": (5_000_000, 200_000), "pyflink": (200_000, 50_000), "spark": (4_000_000, 100_000)},
    "W2v": {"flinklike": (20_000_000, 2_000_000), "flinklike-parquet": (20_000_000, 2_000_000),
            "bytewax": (2_000_000, 200_000), "pyflink": (5_000_000, 1_000_000), "spark": (20_000_000, 200_000)},
    # W3: the keyed count run with and without checkpoints (long enough for several 1 s checkpoints)
    "W3": {"flinklike": (8_000_000, 2_000_000)},
    # W4, W5: records at the fixed --rate, so the run lasts records / rate seconds
    "W4": {"flinklike": (40_000, 8_000), "pyflink": (40_000, 8_000), "spark": (40_000, 8_000)},
    "W5": {"flinklike": (30_000, 6_000), "spark": (30_000, 6_000)},
}  # fmt: skip
#: rows per shared Parquet file (full, quick): every size read from the files is a multiple of it
FILE_ROWS = (1_000_000, 50_000)
#: engines that read the shared Parquet files
FILE_ENGINES = ("flinklike-parquet", "spark")

#: the scenario workloads' own arguments: (full, quick)
SCENARIO_ARGS = {
    "W3": (["--seconds", "10", "--min-checkpoints", "3"], ["--seconds", "2", "--min-checkpoints", "2"]),
    "W4": (["--rate", "2000"], ["--rate", "2000"]),
    "W5": (["--rate", "1000"], ["--rate", "1000"]),
}
#: parallelism of every scenario run: a keyed exchange between two TaskExecutor processes
SCENARIO_PARALLELISM = 2
#: extra variants of a scenario: (engine, workload) -> modes; ``full`` ones are skipped by --quick
SCENARIO_MODES = {("flinklike", "W5"): (None, "readStream")}
QUICK_SKIPS = {
    ("flinklike", "W5", "readStream"): "skipped in --quick: starts Spark",
    ("spark", "W4", None): "skipped in --quick: two Spark start-ups",
    ("pyflink", "W4", None): "skipped in --quick: starts PyFlink's JVM",
    ("spark", "W5", None): "skipped in --quick: starts Spark",
}

#: why an engine does not run a workload
NOT_RUN = {
    ("pyflink", "W1"): "PyFlink's DataStream API has no vectorized (Arrow batch) operator",
    ("pyflink", "W3"): "optional in the issue and not built: this project's W3 alone",
    ("spark", "W3"): "Spark has no checkpoint barriers to align (a micro-batch commits its offsets and state)",
    ("pyflink", "W5"): "not a W5 peer in the issue",
}
#: engines that are no peer for the scenario workloads at all (left out of their tables)
SCENARIO_ENGINES = ("flinklike", "pyflink", "spark")


@dataclasses.dataclass(frozen=True)
class Variant:
    """One setting of an engine: parallelism, PyFlink's execution mode, Spark's micro-batches per input and
    ``spark.sql.shuffle.partitions`` (None: the parallelism)."""

    engine: str
    parallelism: int
    mode: str | None = None
    batches: int | None = None
    shuffle_partitions: int | None = None

    @property
    def label(self) -> str:
        text = f"p={self.parallelism}" + (f", {self.mode}" if self.mode else "")
        if self.batches is not None:
            text += ", whole input in 1 micro-batch" if self.batches == 1 else f", {self.batches} micro-batches"
        if self.shuffle_partitions is not None:
            text += f", {self.shuffle_partitions} shuffle partitions"
        return text


@dataclasses.dataclass
class Outcome:
    variant: Variant
    workload: str
    records: int
    rate: float | None = None  # records per second, None if the run failed
    seconds: float | None = None
    error: str | None = None
    metrics: dict | None = None  # scenario workloads: what the runner measured (once its result checked out)
    extra: dict = dataclasses.field(default_factory=dict)  # what else the runner reported (Spark's micro-batches)
    load: float | None = None  # 1-minute load average when the run started
    wall_seconds: float | None = None  # from submission to the end (``seconds`` is the busy time)
    standalone: bool = False  # the peer's best setting run once more after the rounds (sanity reference)

    @property
    def wall_rate(self) -> float | None:
        return self.records / self.wall_seconds if self.rate is not None and self.wall_seconds else None


#: Spark's sweep: (parallelism, micro-batches per input, shuffle partitions); 1 micro-batch = the whole
#: input at once (maxFilesPerTrigger = every file), 4 = a quarter of the files per micro-batch; shuffle
#: partitions at the parallelism (each core one reducer) or 4x it (smaller reducers)
SPARK_SWEEP = ((1, 1, 1), (1, 1, 4), (2, 1, 2), (2, 1, 8), (2, 4, 2))


def variants(engine: str, workload: str, parallelisms: list[int], modes: list[str], quick: bool) -> list[Variant]:
    """The settings ``engine`` is swept over for ``workload``: its best one is published."""
    if engine == "pyflink":
        # W2v is Flink SQL in the JVM: no Python UDF, so the execution mode does not apply
        return [Variant(engine, p, m) for p in parallelisms for m in (modes[:1] if workload == "W2v" else modes)]
    if engine == "spark":
        sweep = [(p, b, s) for p, b, s in SPARK_SWEEP if p in parallelisms] or [(parallelisms[0], 1, parallelisms[0])]
        return [Variant(engine, p, batches=b, shuffle_partitions=s) for p, b, s in (sweep[:1] if quick else sweep)]
    return [Variant(engine, p) for p in parallelisms]
