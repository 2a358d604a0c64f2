"""SequenceSource: deterministic ``{"key", "seq"}`` rows, generated vectorized.

Every key ``k`` in ``[0, num_keys)`` gets the sequence numbers ``0, 1, 2, ...``
(up to ``records_per_key`` of them, or forever when unbounded). Rows are laid
out s-major (``for seq: for key``), so within any reader each key's ``seq``
values strictly increase by one: exactly what per-key exactly-once tests check.

Split ``i`` of ``create_splits(P)`` owns the keys ``k`` with ``k % P == i``.
Its position is a single integer, the index of the next row within the
split's own row sequence: row ``r`` of a split owning ``n`` keys is
``key = i + P * (r % n)``, ``seq = r // n``. Restoring a reader from the splits
that ``snapshot_state`` returned therefore continues exactly after the last
row returned, with nothing lost and nothing repeated.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from flinklike_spark.connector_api import (
    Boundedness,
    ReadResult,
    Source,
    SourceReader,
    SourceReaderContext,
    SourceSplit,
)
from flinklike_spark.errors import ConfigurationError

__all__ = ["SequenceReader", "SequenceSource", "SequenceSplit"]

_KEY_TYPES = ("int", "str")
# The throttle hands out rows in granules of about this much time, so that a
# low rate does not turn into one tiny batch per poll. 50 ms (half the default
# execution.buffer-timeout.interval, which holds rows back longer anyway): at
# 100 rows/s per reader 10 ms granules cost its task 26 ms of CPU per second,
# 50 ms about 12 (measured).
_THROTTLE_GRANULE_SECONDS = 0.05
# At most this many seconds of unused rate are banked (e.g. while the task was
# backpressured), bounding the burst that follows.
_THROTTLE_BURST_SECONDS = 1.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class SequenceSplit(SourceSplit):
    """The keys ``k`` with ``k % num_splits == index``, positioned at row ``next_row``.

    Attributes:
        index: which residue class of keys this split owns.
        num_splits: the modulus (the parallelism the splits were created for).
        next_row: index of the next row to return within this split's rows
            (0 for a fresh split); rows before it were already returned.
    """

    index: int
    num_splits: int
    next_row: int = 0


def _check_positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigurationError(f"{name} must be a positive int (>= 1), got {value!r}")
    return value


def _check_positive_rate(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ConfigurationError(f"{name} must be a finite number > 0 (or None for no limit), got {value!r}")
    return float(value)


def _check_arrival_rates(steps: object) -> tuple[tuple[float, float], ...]:
    try:
        checked = tuple((float(start), float(rate)) for start, rate in steps)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        raise ConfigurationError(f"arrival_rates must be (seconds, rows per second) pairs, got {steps!r}") from None
    starts = [start for start, _ in checked]
    valid = checked and starts[0] == 0.0 and all(b > a for a, b in zip(starts, starts[1:]))
    if not valid or not all(math.isfinite(r) and r >= 0 for _, r in checked):
        raise ConfigurationError(
            f"arrival_rates must start at 0 s, with increasing times and finite rates >= 0, got {steps!r}"
        )
    return checked


class SequenceSource(Source):
    """Deterministic rows ``{"key": k, "seq": s}`` for keys ``[0, num_keys)``.

    Args:
        num_keys: number of distinct keys (>= 1).
        records_per_key: rows per key (>= 1); None makes the source unbounded.
        rows_per_second: total rate over all readers (> 0); each reader gets
            ``rows_per_second / parallelism`` and answers polls beyond its share
            with ``ReadResult(batch=None, wait_seconds=...)`` instead of sleeping.
            None (default) means as fast as polled.
        arrival_rates: rows arrive as from a producer writing to a topic:
            ``[(seconds after arrival_start, rows per second), ...]`` steps
            (the first at 0, increasing). A reader returns what arrived and
            was not read yet; the rest is its backlog (``pendingRecords``), so
            a job that cannot keep up falls behind and one that restarts
            catches up, as on Kafka. Exclusive with ``rows_per_second``.
        arrival_start: epoch seconds (``time.time()``) at which arrivals start;
            default: when the source is created.
        key_type: ``"int"`` gives an int64 ``key`` column; ``"str"`` gives the
            string ``"k{k}"``.
        batch_size: maximum rows per returned batch (also capped by ``max_rows``).
        clock: monotonic clock in seconds used by the throttle; injectable for tests.

    Raises:
        ConfigurationError: for a non-positive count or rate, or an unknown key_type.

    Guarantees: the union over all readers of all rows is every ``(key, seq)``
    exactly once (bounded mode); per reader each key's ``seq`` increases by one
    from row to row. Batches have the schema ``output_schema()``: ``key`` (int64
    or string) and ``seq`` (int64).
    """

    def __init__(
        self,
        *,
        num_keys: int,
        records_per_key: int | None,
        rows_per_second: float | None = None,
        arrival_rates: Sequence[tuple[float, float]] | None = None,
        arrival_start: float | None = None,
        key_type: Literal["int", "str"] = "int",
        batch_size: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.num_keys = _check_positive_int("num_keys", num_keys)
        self.records_per_key = (
            None if records_per_key is None else _check_positive_int("records_per_key", records_per_key)
        )
        self.rows_per_second = (
            None if rows_per_second is None else _check_positive_rate("rows_per_second", rows_per_second)
        )
        self.arrival_rates = None if arrival_rates is None else _check_arrival_rates(arrival_rates)
        if self.arrival_rates is not None and self.rows_per_second is not None:
            raise ConfigurationError("give rows_per_second or arrival_rates, not both")
        self.arrival_start = time.time() if arrival_start is None else float(arrival_start)
        if key_type not in _KEY_TYPES:
            raise ConfigurationError(f"key_type must be one of {list(_KEY_TYPES)}, got {key_type!r}")
        self.key_type = key_type
        self.batch_size = _check_positive_int("batch_size", batch_size)
        if not callable(clock):
            raise ConfigurationError(f"clock must be a callable returning seconds, got {clock!r}")
        self.clock = clock
        key_arrow_type = pa.int64() if key_type == "int" else pa.string()
        self._schema = pa.schema([("key", key_arrow_type), ("seq", pa.int64())])

    def __repr__(self) -> str:
        return (
            f"SequenceSource(num_keys={self.num_keys}, records_per_key={self.records_per_key}, "
            f"rows_per_second={self.rows_per_second}, arrival_rates={self.arrival_rates}, "
            f"key_type={self.key_type!r}, batch_size={self.batch_size})"
        )

    @property
    def boundedness(self) -> Boundedness:
        return Boundedness.BOUNDED if self.records_per_key is not None else Boundedness.CONTINUOUS_UNBOUNDED

    def output_schema(self) -> pa.Schema:
        return self._schema

    def create_splits(self, parallelism: int) -> list[SequenceSplit]:
        """Exactly ``parallelism`` splits; split ``i`` owns the keys ``k % parallelism == i``.

        With ``parallelism > num_keys`` the surplus splits own no keys and are
        empty from the start.
        """
        _check_positive_int("parallelism", parallelism)
        return [
            SequenceSplit(split_id=f"sequence-{i}-of-{parallelism}", index=i, num_splits=parallelism)
            for i in range(parallelism)
        ]

    def create_reader(self, context: SourceReaderContext) -> SequenceReader:
        return SequenceReader(self, context)

    def arrived(self, now: float) -> float:
        """Rows arrived over all splits by epoch time ``now`` under ``arrival_rates`` (unbounded: inf)."""
        if self.arrival_rates is None:
            return math.inf
        elapsed = now - self.arrival_start
        total = 0.0
        for (start, rate), (end, _) in zip(self.arrival_rates, [*self.arrival_rates[1:], (math.inf, 0.0)]):
            if elapsed <= start:
                break
            total += rate * (min(elapsed, end) - start)
        return total

    def split_num_keys(self, split: SequenceSplit) -> int:
        """How many keys ``split`` owns."""
        if split.index >= self.num_keys:
            return 0
        return (self.num_keys - 1 - split.index) // split.num_splits + 1


class _SplitState:
    """Mutable read position of one split inside a reader."""

    __slots__ = ("split", "num_keys", "next_row", "end_row")

    def __init__(self, split: SequenceSplit, num_keys: int, records_per_key: int | None) -> None:
        self.split = split
        self.num_keys = num_keys
        self.next_row = split.next_row
        # None = unbounded.
        self.end_row = None if records_per_key is None else num_keys * records_per_key

    @property
    def exhausted(self) -> bool:
        return self.num_keys == 0 or (self.end_row is not None and self.next_row >= self.end_row)

    def remaining(self) -> int | None:
        return None if self.end_row is None else max(0, self.end_row - self.next_row)


class SequenceReader(SourceReader):
    """Reads :class:`SequenceSplit` s; several splits are served round-robin, one per poll.

    ``snapshot_state`` returns every assigned split (exhausted ones included)
    with ``next_row`` just after the last row returned.
    """

    def __init__(self, source: SequenceSource, context: SourceReaderContext) -> None:
        self._source = source
        self._context = context
        self._splits: list[_SplitState] = []
        self._turn = 0
        rate = source.rows_per_second
        self._rate = None if rate is None else rate / context.parallelism
        self._tokens = 0.0
        self._last_refill: float | None = None

    def add_splits(self, splits: list[SourceSplit]) -> None:
        for split in splits:
            if not isinstance(split, SequenceSplit):
                raise ConfigurationError(
                    f"SequenceReader can only read SequenceSplit, got {type(split).__name__}: {split!r}"
                )
            if split.next_row < 0:
                raise ConfigurationError(f"split {split.split_id!r} has negative next_row {split.next_row}")
            num_keys = self._source.split_num_keys(split)
            self._splits.append(_SplitState(split, num_keys, self._source.records_per_key))

    def open(self) -> None:
        self._last_refill = self._source.clock()

    def poll_next(self, max_rows: int) -> ReadResult:
        if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows <= 0:
            raise ConfigurationError(f"max_rows must be a positive int (>= 1), got {max_rows!r}")
        live = [s for s in self._splits if not s.exhausted]
        if not live:
            return ReadResult(end_of_input=True)
        state = live[self._turn % len(live)]
        self._turn += 1
        limit = min(max_rows, self._source.batch_size)
        if self._source.arrival_rates is not None:
            return self._poll_arrived(live, limit)
        remaining = state.remaining()
        if remaining is not None:
            limit = min(limit, remaining)
        if self._rate is not None:
            granted, wait = self._acquire(limit)
            if granted == 0:
                return ReadResult(wait_seconds=wait)
            limit = granted
        batch = self._generate(state, limit)
        state.next_row += limit
        return ReadResult(batch=batch)

    def _arrived(self, state: _SplitState, now: float) -> int:
        """Rows of ``state``'s split arrived by ``now`` (its share of every key's arrivals)."""
        source = self._source
        rows = int(source.arrived(now) * state.num_keys / source.num_keys)
        return rows if state.end_row is None else min(rows, state.end_row)

    def _poll_arrived(self, live: list[_SplitState], limit: int) -> ReadResult:
        now = time.time()
        for step in range(len(live)):
            state = live[(self._turn + step) % len(live)]
            available = self._arrived(state, now) - state.next_row
            if available > 0:
                self._turn += step
                count = min(limit, available)
                batch = self._generate(state, count)
                state.next_row += count
                return ReadResult(batch=batch)
        return ReadResult(wait_seconds=_THROTTLE_GRANULE_SECONDS)

    def pending_records(self) -> int | None:
        """Rows arrived and not read yet (``arrival_rates``); None for a source without arrivals."""
        if self._source.arrival_rates is None:
            return None
        now = time.time()
        return sum(max(0, self._arrived(s, now) - s.next_row) for s in self._splits if not s.exhausted)

    def _acquire(self, wanted: int) -> tuple[int, float]:
        """Token bucket: rows allowed now (<= wanted), or 0 and how long to wait."""
        now = self._source.clock()
        if self._last_refill is None:  # poll without open(): start the bucket now
            self._last_refill = now
        rate = self._rate
        granule = max(1, min(wanted, math.ceil(rate * _THROTTLE_GRANULE_SECONDS)))
        capacity = max(granule, rate * _THROTTLE_BURST_SECONDS)
        self._tokens = min(capacity, self._tokens + max(0.0, now - self._last_refill) * rate)
        self._last_refill = now
        # The epsilon absorbs float error: sleeping exactly the advised wait must grant the granule.
        if self._tokens + 1e-9 < granule:
            return 0, (granule - self._tokens) / rate
        granted = min(wanted, int(self._tokens + 1e-9))
        self._tokens = max(0.0, self._tokens - granted)
        return granted, 0.0

    def _generate(self, state: _SplitState, count: int) -> pa.RecordBatch:
        split = state.split
        n = state.num_keys
        rows = np.arange(state.next_row, state.next_row + count, dtype=np.int64)
        if n == 1:
            seq = rows
            keys = np.full(count, split.index, dtype=np.int64)
        else:
            seq, slot = np.divmod(rows, n)
            keys = slot * split.num_splits + split.index if split.num_splits != 1 else slot
        key_array = pa.array(keys)
        if self._source.key_type == "str":
            key_array = pc.binary_join_element_wise("k", pc.cast(key_array, pa.string()), "")
        return pa.RecordBatch.from_arrays([key_array, pa.array(seq)], schema=self._source.output_schema())

    def snapshot_state(self, checkpoint_id: int) -> list[SequenceSplit]:
        return [dataclasses.replace(s.split, next_row=s.next_row) for s in self._splits]

    def close(self) -> None:
        self._splits = []
