"""The table of configuration options: Flink's keys, their parsers, defaults and valid ranges.

:class:`~flinklike_spark.config.Configuration` validates every key against
:data:`OPTIONS` (or :data:`PATTERN_OPTIONS` for keys with a name inside them);
:data:`DEPRECATED_KEYS` maps Flink's older spellings to the keys that replaced
them, as Flink's ``withDeprecatedKeys`` does.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import math
import re
from collections.abc import Callable, Mapping
from datetime import timedelta
from enum import Enum
from typing import Any, Generic, TypeVar

from flinklike_spark.config_enums import (
    PROMETHEUS_REPORTER_FACTORY,
    CheckpointingMode,
    CheckpointStorageType,
    ExecutionTarget,
    FailoverStrategyType,
    SchedulerMode,
    SchedulerType,
    StateBackendType,
    TaskManagerMode,
    TaskManagerStartMethod,
    parse_failover_strategy,
    parse_reporter_factory,
    parse_restart_strategy,
    parse_runtime_mode,
    parse_state_backend,
)
from flinklike_spark.config_parsers import (
    INT_MAX,
    MAX_DURATION,
    MIN_CHECKPOINT_TIME,
    UPPER_BOUND_MAX_PARALLELISM,
    enum_parser,
    format_bound,
    format_bytes,
    parse_bool,
    parse_duration,
    parse_float,
    parse_int,
    parse_memory_size,
    parse_optional_location,
    parse_optional_str,
    parse_pattern_value,
    parse_port_range,
    parse_signed_duration,
)
from flinklike_spark.errors import ConfigurationError

__all__ = [
    "DEPRECATED_KEYS",
    "OPTIONS",
    "PATTERN_OPTIONS",
    "ConfigOption",
    "current_key",
    "fold_key_case",
    "format_value",
    "is_pattern_key",
    "parse_value",
    "unknown_key_error",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConfigOption(Generic[T]):
    """One configuration key: its parser, default, valid range and description.

    Attributes:
        key: Flink's configuration key.
        default: the value when the key is not set (None: unset means "off").
        parse: ``parse(value, key=key)`` -> the typed value; raises ConfigurationError.
        description: one line for users.
        minimum / maximum: inclusive bounds of the parsed value (ints, byte
            counts, timedeltas), or None for no bound. Every number-like option
            has both, so no value can silently be absurd.
        optional: None (or ``""``) is a valid value meaning "unset" (the default).
        format_bound: renders a bound in messages (default: durations as
            ``"10 ms"``, numbers with thousands separators).
    """

    key: str
    default: T
    parse: Callable[..., T]
    description: str
    minimum: Any = None
    maximum: Any = None
    optional: bool = False
    format_bound: Callable[[Any], str] = format_bound

    def valid_range(self) -> str:
        """The valid range in words, e.g. ``"between 10 ms and 365 days"``."""
        low, high = self.minimum, self.maximum
        if low is not None and high is not None:
            text = f"between {self.format_bound(low)} and {self.format_bound(high)}"
        elif low is not None:
            text = f"at least {self.format_bound(low)}"
        elif high is not None:
            text = f"at most {self.format_bound(high)}"
        else:
            text = "any value"
        return f"{text}, or unset (None)" if self.optional else text

    def convert(self, value: object) -> T:
        """Parse and range-check ``value``.

        Raises:
            ConfigurationError: naming the key, the value and the valid range.
        """
        if self.optional and (value is None or value == ""):
            return None  # type: ignore[return-value]
        parsed = self.parse(value, key=self.key)
        if parsed is None:
            return parsed
        if isinstance(parsed, float) and not math.isfinite(parsed):
            raise ConfigurationError(f"{self.key}: {value!r} is not a finite number; valid: {self.valid_range()}")
        if (self.minimum is not None and parsed < self.minimum) or (self.maximum is not None and parsed > self.maximum):
            raise ConfigurationError(
                f"{self.key}: {value!r} is out of range; valid: {self.valid_range()}. {self.description}"
            )
        return parsed


_duration = parse_duration
_memory = parse_memory_size

# The bound an option gets when its row names none, by parser: every duration and
# integer option is bounded even if its row forgets to say so.
_DEFAULT_MAXIMUM: dict[Callable[..., Any], Any] = {parse_duration: MAX_DURATION, parse_int: INT_MAX}


def _opt(
    key: str,
    default: Any,
    parse: Callable[..., Any],
    description: str,
    minimum: Any = None,
    maximum: Any = None,
    *,
    optional: bool = False,
) -> ConfigOption[Any]:
    """One row of the option table.

    ``minimum``/``maximum`` are in the parsed type (a ``timedelta`` for
    durations; a plain number there means seconds). Without a ``maximum``,
    durations are bounded by :data:`MAX_DURATION` and integers by 2^31 - 1.
    """
    if parse is parse_duration and isinstance(minimum, int | float):
        minimum = timedelta(seconds=minimum)
    if maximum is None:
        maximum = _DEFAULT_MAXIMUM.get(parse)
    formatter = format_bytes if parse is parse_memory_size else format_bound
    return ConfigOption(key=key, default=default, parse=parse, description=description, minimum=minimum,
                        maximum=maximum, optional=optional, format_bound=formatter)  # fmt: skip


_MS = timedelta(milliseconds=1)
_ZERO = timedelta(0)

OPTIONS: dict[str, ConfigOption[Any]] = {
    o.key: o
    for o in (
        _opt("parallelism.default", 1, parse_int, "Default parallelism of operators.",
             1, UPPER_BOUND_MAX_PARALLELISM),
        _opt("pipeline.max-parallelism", 128, parse_int, "Number of key groups of keyed state.",
             1, UPPER_BOUND_MAX_PARALLELISM),
        _opt("pipeline.name", None, parse_optional_str, "The job's name."),
        _opt("python.files", None, parse_optional_str,
             "Python files or directories added with add_python_file (comma-separated)."),
        _opt("pipeline.auto-watermark-interval", timedelta(milliseconds=200), _duration,
             "How often sources emit watermarks.", _ZERO),
        _opt("execution.buffer-timeout.interval", timedelta(milliseconds=100), _duration,
             "Longest time a partially filled output buffer waits before it is sent (0: at once).", _ZERO),
        _opt("execution.runtime-mode", "streaming", parse_runtime_mode,
             "STREAMING (AUTOMATIC means STREAMING); bounded sources finish the job."),
        _opt("execution.target", ExecutionTarget.LOCAL, enum_parser(ExecutionTarget),
             "local: an embedded cluster on this machine; spark: TaskExecutors on the Spark executors of the "
             "active SparkSession, the JobMaster in its driver."),
        _opt("jobmanager.rpc.address", None, parse_optional_str,
             "Interface the JobMaster's RPC binds and advertises; unset: 127.0.0.1 (local), "
             "spark.driver.host (spark)."),
        _opt("taskmanager.host", None, parse_optional_str,
             "Interface TaskExecutors bind and advertise; unset: 127.0.0.1 (local), the executor's host (spark)."),
        _opt("taskmanager.numberOfTaskSlots", 1, parse_int, "Slots per TaskExecutor.",
             1, UPPER_BOUND_MAX_PARALLELISM),
        _opt("local.number-taskmanager", 1, parse_int,
             "TaskExecutors of the local MiniCluster; each is a Python process (or thread) of its own.", 1, 128),
        _opt("slotmanager.redundant-taskmanager-num", 0, parse_int,
             "Spare TaskExecutors kept beyond the jobs' needs: a lost one's tasks redeploy at once onto their "
             "free slots while a replacement starts (Flink's FLINK-18625).", 0, 128),
        _opt("slotmanager.number-of-slots.max", None, parse_int,
             "Most slots the cluster may have; set, a rescale to more slots than it has starts TaskExecutors up to "
             "it, and a rescale down stops those that hold none. Unset: the cluster keeps its size.",
             1, 4096, optional=True),
        _opt("flinklike.local.taskmanager-mode", TaskManagerMode.PROCESS, enum_parser(TaskManagerMode),
             "Run local TaskExecutors as child processes or as threads of the client."),
        _opt("flinklike.local.taskmanager-start-method", TaskManagerStartMethod.FORKSERVER,
             enum_parser(TaskManagerStartMethod), "Start local TaskExecutor processes by forking them from a "
             "helper that imported their modules once (forkserver), or as fresh interpreters (spawn)."),
        _opt("process.taskmanager.working-dir", None, parse_optional_location,
             "Local directory under which every local TaskExecutor process gets a private working directory "
             "tm_<resource id> (its cwd, with its TMPDIR in tmp/); unset: TaskExecutors share the client's. "
             "Only the object store is then shared (no shared local disk)."),
        _opt("taskmanager.memory.segment-size", 32 * 1024, _memory, "Target bytes of one network buffer.",
             64, 64 << 20),
        _opt("taskmanager.network.memory.buffers-per-channel", 2, parse_int,
             "Exclusive buffers (credit) per input channel.", 1, 10_000),
        _opt("taskmanager.network.memory.floating-buffers-per-gate", 8, parse_int,
             "Buffers an input gate adds to each remote channel's credit, beyond its exclusive buffers.", 1, 10_000),
        _opt("taskmanager.network.memory.max-buffers-per-channel", 10, parse_int,
             "Buffers a result subpartition may hold before the producing task is backpressured.", 1, 10_000),
        _opt("taskmanager.network.request-backoff.max", timedelta(seconds=30), _duration,
             "How long a consumer waits for its producer's partition to appear.", _MS),
        _opt("heartbeat.interval", timedelta(seconds=10), _duration, "TaskExecutor heartbeat interval.", _MS),
        _opt("heartbeat.timeout", timedelta(seconds=50), _duration, "Heartbeat timeout of a TaskExecutor.", _MS),
        _opt("slot.request.timeout", timedelta(minutes=5), _duration, "How long a slot request may wait.", _MS),
        _opt("taskmanager.slot.timeout", timedelta(seconds=10), _duration,
             "Timeout of an allocated but inactive slot.", _MS),
        # -- failover (restart_strategy.py / failover.py parse these into typed configs) --
        _opt("restart-strategy.type", None, parse_restart_strategy,
             "none/off/disable, fixed-delay, failure-rate or exponential-delay; unset: exponential-delay "
             "with checkpointing, else none.", optional=True),
        _opt("restart-strategy.fixed-delay.attempts", 1, parse_int, "Restarts before the job fails.", 0),
        _opt("restart-strategy.fixed-delay.delay", timedelta(seconds=1), _duration, "Delay between restarts.", _ZERO),
        _opt("restart-strategy.failure-rate.max-failures-per-interval", 1, parse_int,
             "Failures tolerated within one interval.", 1),
        _opt("restart-strategy.failure-rate.failure-rate-interval", timedelta(minutes=1), _duration,
             "The failure-rate window.", _MS),
        _opt("restart-strategy.failure-rate.delay", timedelta(seconds=1), _duration, "Delay between restarts.", _ZERO),
        _opt("restart-strategy.exponential-delay.initial-backoff", timedelta(seconds=1), _duration,
             "First restart delay.", _MS),
        _opt("restart-strategy.exponential-delay.max-backoff", timedelta(minutes=1), _duration,
             "Largest restart delay.", _MS),
        _opt("restart-strategy.exponential-delay.backoff-multiplier", 1.5, parse_float,
             "Delay growth per restart.", 1.0, 1_000.0),
        _opt("restart-strategy.exponential-delay.reset-backoff-threshold", timedelta(hours=1), _duration,
             "Failure-free time after which the delay resets.", _MS),
        _opt("restart-strategy.exponential-delay.jitter-factor", 0.1, parse_float,
             "Random +-share of the delay.", 0.0, 1.0),
        _opt("restart-strategy.exponential-delay.attempts-before-reset-backoff", 2**31 - 1, parse_int,
             "Restarts before the job fails, counted since the last backoff reset.", 1),
        _opt("jobmanager.scheduler", SchedulerType.DEFAULT, enum_parser(SchedulerType),
             "default: the parallelism is fixed; adaptive: a running job can be rescaled (docs/elastic.md)."),
        # -- the autoscaler (flinklike_spark/_runtime/autoscaler/, docs/elastic.md); Flink's keys and defaults --
        _opt("job.autoscaler.enabled", False, parse_bool,
             "Rescale jobs of the adaptive scheduler from their busy time, processing and input rates."),
        _opt("job.autoscaler.scaling.enabled", True, parse_bool,
             "Apply decisions; false: only compute and record them (Flink's metrics-only mode)."),
        _opt("autoscaler.standalone.control-loop.interval", timedelta(seconds=10), _duration,
             "How often the autoscaler collects metrics and evaluates a job.", _MS),
        _opt("job.autoscaler.metrics.window", timedelta(minutes=15), _duration,
             "Metrics are averaged over this window; a decision needs a full window.", _MS),
        _opt("job.autoscaler.stabilization.interval", timedelta(minutes=5), _duration,
             "After a job (re)started, no metrics are collected for this long.", _ZERO),
        _opt("job.autoscaler.target.utilization", 0.7, parse_float,
             "Busy share a vertex is scaled to.", 0.01, 1.0),
        _opt("job.autoscaler.target.utilization.boundary", 0.3, parse_float,
             "A vertex is rescaled only once its utilization leaves target +- boundary.", 0.0, 1.0),
        _opt("job.autoscaler.restart.time", timedelta(minutes=5), _duration,
             "Expected time of a rescale; its backlog is planned to be caught up too.", _ZERO),
        _opt("job.autoscaler.catch-up.duration", timedelta(minutes=30), _duration,
             "Time in which a scaled job should have worked off its sources' backlog.", _MS),
        _opt("job.autoscaler.scale-down.interval", timedelta(hours=1), _duration,
             "A scale-down waits this long after the first evaluation that recommended it (0: at once).", _ZERO),
        _opt("job.autoscaler.scale-down.max-factor", 0.6, parse_float,
             "Largest share of a vertex's parallelism one scale-down removes.", 0.0, 1.0),
        _opt("job.autoscaler.scale-up.max-factor", 100_000.0, parse_float,
             "Largest factor (beyond 1) one scale-up adds to a vertex's parallelism.", 0.0, 1e9),
        _opt("job.autoscaler.vertex.min-parallelism", 1, parse_int, "Lowest parallelism a vertex is scaled to.",
             1, UPPER_BOUND_MAX_PARALLELISM),
        _opt("job.autoscaler.vertex.max-parallelism", 200, parse_int,
             "Highest parallelism a vertex is scaled to (also capped by its max parallelism).",
             1, UPPER_BOUND_MAX_PARALLELISM),
        _opt("scheduler-mode", None, enum_parser(SchedulerMode),
             "reactive: a job uses every slot of the cluster and rescales when TaskExecutors come or go; it "
             "forces jobmanager.scheduler: adaptive, as in Flink. Unset: the scheduler's own behaviour.",
             optional=True),
        _opt("jobmanager.adaptive-scheduler.resource-wait-timeout", timedelta(minutes=5), parse_signed_duration,
             "How long a job of the adaptive scheduler waits for the slots its lower bounds need before it "
             "fails; negative: for ever (the default under scheduler-mode: reactive).", -MAX_DURATION, MAX_DURATION),
        _opt("jobmanager.adaptive-scheduler.resource-stabilization-timeout", timedelta(seconds=10), _duration,
             "How long the slots must stay unchanged before a job of the adaptive scheduler starts with fewer "
             "than its upper bounds (or, in reactive mode, rescales to them).", _ZERO),
        _opt("jobmanager.execution.failover-strategy", FailoverStrategyType.REGION, parse_failover_strategy,
             "region: restart the failed task's pipelined region and its consumers; full: every task."),
        _opt("execution.checkpointing.interval", None, _duration,
             "Checkpoint interval; unset disables periodic checkpoints (Flink's minimum is 10 ms).",
             MIN_CHECKPOINT_TIME, optional=True),
        _opt("execution.checkpointing.mode", CheckpointingMode.EXACTLY_ONCE, enum_parser(CheckpointingMode),
             "exactly-once or at-least-once."),
        _opt("execution.checkpointing.unaligned.enabled", False, parse_bool, "Take unaligned checkpoints."),
        _opt("execution.checkpointing.aligned-checkpoint-timeout", _ZERO, _duration,
             "With unaligned enabled: start aligned and switch after this timeout (0 = unaligned at once).", _ZERO),
        _opt("execution.checkpointing.timeout", timedelta(minutes=10), _duration, "Checkpoint timeout.",
             MIN_CHECKPOINT_TIME),
        _opt("execution.checkpointing.max-concurrent-checkpoints", 1, parse_int,
             "Checkpoints in progress at once.", 1),
        _opt("execution.checkpointing.min-pause", _ZERO, _duration, "Pause between checkpoints.", _ZERO),
        _opt("execution.checkpointing.checkpoints-after-tasks-finish", True, parse_bool,
             "Checkpoint the running part of a job whose tasks partly finished; a final checkpoint at the end."),
        _opt("execution.checkpointing.tolerable-failed-checkpoints", 0, parse_int,
             "Consecutive checkpoint failures tolerated before the job fails.", 0),
        _opt("execution.checkpointing.num-retained", 1, parse_int, "Completed checkpoints kept.", 1),
        _opt("execution.state-recovery.from-local", False, parse_bool,
             "Task-local recovery: each TaskExecutor keeps a local copy of its subtasks' last snapshot "
             "(keyed state held in memory) in its working directory; a subtask restarted on the same "
             "TaskExecutor restores it from there when it is of the checkpoint being restored."),
        _opt("state.backend.local-recovery", False, parse_bool,
             "Deprecated: use execution.state-recovery.from-local (either one set to true enables it)."),
        _opt("execution.checkpointing.incremental", False, parse_bool,
             "Keyed state checkpoints write only the keys changed since the previous checkpoint, on top of a "
             "periodically materialized full base (savepoints stay self-contained)."),
        _opt("state.backend.changelog.periodic-materialize.interval", timedelta(minutes=10), _duration,
             "With incremental checkpoints: write a full base at the first checkpoint after this much time "
             "since the last one.", _MS),
        _opt("execution.checkpointing.incremental.max-chain-length", 20, parse_int,
             "With incremental checkpoints: write a full base when a subtask's chain (base plus changes) "
             "would get longer than this, which bounds what a restore reads.", 1, 10_000),
        _opt("state.backend.type", StateBackendType.HASHMAP, parse_state_backend,
             "Where keyed state lives: hashmap (the Python heap) or rocksdb (an embedded RocksDB per slot)."),
        _opt("state.backend.rocksdb.localdir", None, parse_optional_str,
             "Directory of the RocksDB instances of the rocksdb backend; unset: the system temp directory."),
        _opt("state.backend.rocksdb.memory.managed", True, parse_bool,
             "Cap RocksDB's block cache and write buffers to the slot's memory budget."),
        _opt("state.backend.rocksdb.memory.fixed-per-slot", None, _memory,
             "Memory budget of one slot's rocksdb backend (hot-key cache + RocksDB); unset: 128 mb.",
             1 << 20, optional=True),
        _opt("state.backend.rocksdb.memory.write-buffer-ratio", 0.5, parse_float,
             "Share of RocksDB's memory for write buffers (memtables).", 0.01, 0.99),
        _opt("execution.checkpointing.dir", None, parse_optional_location, "Checkpoint storage URL (fsspec)."),
        _opt("execution.checkpointing.storage", None, enum_parser(CheckpointStorageType),
             "jobmanager (checkpoints live as long as the job) or filesystem (in execution.checkpointing.dir); "
             "unset: filesystem if the dir is set, else jobmanager.", optional=True),
        _opt("execution.state-recovery.path", None, parse_optional_location, "Checkpoint or savepoint to start from."),
        _opt("execution.state-recovery.accept-duplicate-sink-output", False, parse_bool,
             "Restore even when an exactly-once sink already committed output of a newer checkpoint "
             "(that output is written again: at-least-once)."),
        # -- observability (flinklike_spark/_runtime/rest/ reads the typed view Configuration.rest) --
        _opt("rest.port", 8081, parse_int, "Port of the REST API and web dashboard (0: any free port; if "
             "unset and 8081 is taken, a free one).", 0, 65535),
        _opt("rest.address", None, parse_optional_str,
             "Address clients use for the REST API; unset: the bind address."),
        _opt("rest.bind-address", None, parse_optional_str,
             "Interface the REST server binds; unset: 127.0.0.1 (loopback only)."),
        _opt("web.cancel.enable", True, parse_bool, "Allow cancelling jobs from the REST API and dashboard."),
        _opt("web.refresh-interval", timedelta(seconds=3), _duration, "How often the dashboard refreshes.",
             timedelta(milliseconds=100)),
        _opt("metrics.fetcher.update-interval", timedelta(seconds=10), _duration,
             "Oldest task metrics the REST API serves before it asks the TaskExecutors again "
             "(they also send metrics with every heartbeat).", _ZERO),
        _opt("metrics.reporter.prom.factory.class", None, parse_reporter_factory,
             f"Set to {PROMETHEUS_REPORTER_FACTORY} to serve every metric to Prometheus.", optional=True),
        _opt("metrics.reporter.prom.port", (9249, 9249), parse_port_range,
             "Port (or range, e.g. 9250-9260) of the Prometheus endpoint; 0: any free port."),
        # -- object storage (flinklike_spark/storage.py derives each client's options from these) --
        _opt("s3.endpoint", None, parse_optional_str, "S3 endpoint URL (MinIO, a local server); unset: AWS."),
        _opt("s3.access-key", None, parse_optional_str, "S3 access key; unset: the standard AWS credential chain."),
        _opt("s3.secret-key", None, parse_optional_str, "S3 secret key (never logged)."),
        _opt("s3.session-token", None, parse_optional_str, "S3 session token of temporary credentials."),
        _opt("s3.region", None, parse_optional_str, "S3 region, e.g. eu-west-1."),
        _opt("s3.path.style.access", None, parse_bool,
             "Path-style requests (http://host/bucket/key), as MinIO and local servers need; "
             "unset: the client's default.", optional=True),
        _opt("s3.proxy.host", None, parse_optional_str, "Host of an HTTP proxy for S3 requests (with s3.proxy.port)."),
        _opt("s3.proxy.port", None, parse_int, "Port of the S3 HTTP proxy.", 1, 65535, optional=True),
    )
}  # fmt: skip

#: Keys with the account name inside them (Flink's and Hadoop's spelling), parsed by flinklike_spark.storage.
PATTERN_OPTIONS: dict[str, re.Pattern[str]] = {
    "fs.azure.account.key.<account>.blob.core.windows.net": re.compile(
        r"^fs\.azure\.account\.key\.[a-z0-9]{3,24}\.(?:blob|dfs)\.core\.windows\.net$"
    ),
    "fs.azure.account.endpoint.<account>": re.compile(r"^fs\.azure\.account\.endpoint\.[a-z0-9]{3,24}$"),
}


_KEYS_BY_LOWER_CASE = {key.lower(): key for key in OPTIONS}


def fold_key_case(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with every key that matches a configuration key case-insensitively spelled as that key.

    Spark lower-cases data source option keys (``taskmanager.numberOfTaskSlots``
    arrives as ``taskmanager.numberoftaskslots``); this restores Flink's
    spelling. Other keys are returned unchanged, so :class:`Configuration`
    still rejects them by name.
    """
    return {_KEYS_BY_LOWER_CASE.get(key.lower(), key): value for key, value in values.items()}


#: Flink's older spellings of keys, each read as the key that replaced it (Flink's ``withDeprecatedKeys``):
#: a configuration that uses one is accepted with a warning naming the new key; the new key wins if both are set.
DEPRECATED_KEYS: Mapping[str, str] = {
    "execution.savepoint.path": "execution.state-recovery.path",
    "state.checkpoints.dir": "execution.checkpointing.dir",
    "state.checkpoints.num-retained": "execution.checkpointing.num-retained",
    "state.checkpoint-storage": "execution.checkpointing.storage",
    "state.backend.incremental": "execution.checkpointing.incremental",
    "state.backend": "state.backend.type",
}

_warned_deprecated: set[str] = set()


def current_key(key: str) -> str:
    """``key``, or the key that replaced it if it is one of :data:`DEPRECATED_KEYS` (warned once per process)."""
    new_key = DEPRECATED_KEYS.get(key)
    if new_key is None:
        return key
    if key not in _warned_deprecated:
        _warned_deprecated.add(key)
        logger.warning("Configuration key %r is deprecated, please use %r instead", key, new_key)
    return new_key


def is_pattern_key(key: str) -> bool:
    return any(pattern.match(key) for pattern in PATTERN_OPTIONS.values())


def unknown_key_error(key: object) -> ConfigurationError:
    """The error for a key no option has: the closest valid keys, and where all of them are listed."""
    if not isinstance(key, str):
        return ConfigurationError(
            f"configuration keys must be strings (Flink's keys, e.g. 'parallelism.default'), "
            f"got {type(key).__name__} {key!r}"
        )
    close = difflib.get_close_matches(key, [*OPTIONS, *DEPRECATED_KEYS], n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else "."
    return ConfigurationError(
        f"unknown configuration key {key!r}{hint} Flink's keys this engine knows are described in "
        f"docs/configuration.md; flinklike_spark.config.Configuration.valid_keys() lists every one"
    )


def parse_value(key: object, value: object) -> Any:
    """``value`` parsed and range-checked for ``key`` (a current key or a pattern key).

    Raises:
        ConfigurationError: an unknown key, or a value that does not parse or is out of range.
    """
    option = OPTIONS.get(key) if isinstance(key, str) else None
    if option is not None:
        return option.convert(value)
    if isinstance(key, str) and is_pattern_key(key):
        return parse_pattern_value(key, value)
    raise unknown_key_error(key)


def format_value(value: object) -> str:
    """A parsed value in the string form Flink's configuration file uses; :func:`parse_value` reads it back."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, timedelta):
        return f"{value // timedelta(milliseconds=1)} ms" if value % timedelta(milliseconds=1) == timedelta(0) \
            else f"{value.total_seconds()} s"  # fmt: skip
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, tuple):  # port ranges
        low, high = value
        return str(low) if low == high else f"{low}-{high}"
    return str(value)
