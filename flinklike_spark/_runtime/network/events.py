"""Runtime events that travel in-band with data buffers, and their wire encoding.

A channel carries Arrow record batches and, in the same order, *events*:
checkpoint barriers, barrier announcements, cancel-checkpoint markers,
watermarks and end-of-partition. Events are small frozen dataclasses; they are
encoded with :func:`encode_event` into a compact, versioned binary form when
they cross a process boundary (never pickle: the data plane decodes bytes from
other processes before anything else is trusted).

Wire format (all integers little-endian)::

    byte 0      format version (currently 1)
    byte 1      event tag (see ``_Tag``)
    bytes 2..   tag-specific fixed-size payload

    barrier       q checkpoint_id, q timestamp_ms, B checkpoint_type,
                  B alignment, q aligned_checkpoint_timeout in microseconds
                  (-1 = None)
    announcement  q sequence_number, then a full encoded barrier
    cancel        q checkpoint_id
    watermark     q timestamp_ms
    end           (empty)
    status        B idle (1) or active (0)

:func:`decode_event` rejects unknown versions, tags, enum codes, truncated and
trailing bytes with :class:`~flinklike_spark.errors.EventDecodingError`.

Thread rules: everything here is immutable and safe to share between threads.
"""

from __future__ import annotations

import dataclasses
import struct
from datetime import timedelta
from enum import Enum, IntEnum
from typing import ClassVar

import pyarrow as pa

from checkpointing.schemas import CheckpointKind
from flinklike_spark.common.watermark_strategy import MAX_WATERMARK
from flinklike_spark.errors import EventDecodingError

__all__ = [
    "ENCODING_VERSION",
    "AlignmentType",
    "BufferOrEvent",
    "CancelCheckpointMarker",
    "CheckpointBarrier",
    "CheckpointOptions",
    "EndOfData",
    "EndOfPartition",
    "EventAnnouncement",
    "RuntimeEvent",
    "Watermark",
    "WatermarkStatus",
    "decode_event",
    "encode_event",
]

ENCODING_VERSION = 1
"""Version byte written by :func:`encode_event`; :func:`decode_event` accepts only this."""


class AlignmentType(Enum):
    """How a task treats its inputs between the first and the last barrier.

    ALIGNED: block channels that delivered the barrier until all have.
    UNALIGNED: snapshot at the first barrier, persist overtaken in-flight data.
    FORCED_ALIGNED: unaligned checkpoints are configured but this barrier must
    be aligned (e.g. a savepoint-like situation or an unsupported edge).
    """

    ALIGNED = "aligned"
    UNALIGNED = "unaligned"
    FORCED_ALIGNED = "forced_aligned"


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointOptions:
    """How one checkpoint is taken; carried by every barrier of that checkpoint.

    Attributes:
        checkpoint_type: checkpoint or savepoint. Savepoints are always aligned.
        alignment: the alignment mode of this barrier.
        aligned_checkpoint_timeout: for ALIGNED checkpoints, how long after the
            trigger alignment may last before the task switches to unaligned
            (Flink's ``execution.checkpointing.aligned-checkpoint-timeout``).
            ``None`` means never switch. Must be ``>= 0``.

    Raises:
        ValueError: from the constructor for a savepoint that is UNALIGNED or a
            negative timeout.
    """

    checkpoint_type: CheckpointKind = CheckpointKind.CHECKPOINT
    alignment: AlignmentType = AlignmentType.ALIGNED
    aligned_checkpoint_timeout: timedelta | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.checkpoint_type, CheckpointKind):
            raise ValueError(
                f"checkpoint_type must be one of {[t.name for t in CheckpointKind]}, got {self.checkpoint_type!r}"
            )
        if not isinstance(self.alignment, AlignmentType):
            raise ValueError(f"alignment must be one of {[a.name for a in AlignmentType]}, got {self.alignment!r}")
        if self.checkpoint_type is CheckpointKind.SAVEPOINT and self.alignment is AlignmentType.UNALIGNED:
            raise ValueError("a savepoint is always aligned; got alignment UNALIGNED")
        timeout = self.aligned_checkpoint_timeout
        if timeout is not None and timeout < timedelta(0):
            raise ValueError(f"aligned_checkpoint_timeout must be >= 0 or None, got {timeout}")

    @property
    def is_unaligned(self) -> bool:
        """True when the barrier is processed unaligned (snapshot at the first barrier)."""
        return self.alignment is AlignmentType.UNALIGNED

    @property
    def needs_alignment(self) -> bool:
        """True when channels must be blocked until every barrier arrived (ALIGNED or FORCED_ALIGNED)."""
        return self.alignment is not AlignmentType.UNALIGNED

    @property
    def is_timeoutable(self) -> bool:
        """True for an aligned checkpoint that switches to unaligned after its timeout."""
        return (
            self.alignment is AlignmentType.ALIGNED
            and self.checkpoint_type is CheckpointKind.CHECKPOINT
            and self.aligned_checkpoint_timeout is not None
        )

    def as_unaligned(self) -> CheckpointOptions:
        """These options with UNALIGNED alignment (``self`` if already unaligned).

        Raises:
            ValueError: for a savepoint, which cannot be taken unaligned.
        """
        if self.alignment is AlignmentType.UNALIGNED:
            return self
        if self.checkpoint_type is CheckpointKind.SAVEPOINT:
            raise ValueError("a savepoint cannot be converted to an unaligned checkpoint")
        return dataclasses.replace(self, alignment=AlignmentType.UNALIGNED)


@dataclasses.dataclass(frozen=True)
class CheckpointBarrier:
    """Barrier of checkpoint ``checkpoint_id``, injected at the sources at ``timestamp_ms``.

    ``timestamp_ms`` is the trigger's wall-clock time as epoch milliseconds: it
    is a wire value (it crosses processes), not a duration.
    """

    checkpoint_id: int
    timestamp_ms: int
    options: CheckpointOptions = CheckpointOptions()

    @property
    def is_unaligned(self) -> bool:
        """True if this barrier is processed unaligned."""
        return self.options.is_unaligned

    def as_unaligned(self) -> CheckpointBarrier:
        """The same barrier with unaligned options (``self`` if already unaligned)."""
        if self.options.is_unaligned:
            return self
        return dataclasses.replace(self, options=self.options.as_unaligned())


@dataclasses.dataclass(frozen=True)
class EventAnnouncement:
    """Priority notice that ``announced_event`` is queued at ``sequence_number`` behind data.

    Lets an aligned-with-timeout consumer prioritize a barrier still stuck
    behind buffers when it switches to unaligned.
    """

    announced_event: CheckpointBarrier
    sequence_number: int


@dataclasses.dataclass(frozen=True)
class CancelCheckpointMarker:
    """Tells downstream tasks that checkpoint ``checkpoint_id`` was aborted upstream."""

    checkpoint_id: int


@dataclasses.dataclass(frozen=True)
class Watermark:
    """Event time has progressed to ``timestamp_ms`` (epoch milliseconds) on this channel."""

    timestamp_ms: int

    MAX_WATERMARK: ClassVar[Watermark]
    """The watermark that ends event time (``2**63 - 1``), emitted when a bounded input ends."""


Watermark.MAX_WATERMARK = Watermark(MAX_WATERMARK)


@dataclasses.dataclass(frozen=True)
class WatermarkStatus:
    """Flink's ``WatermarkStatus``: the channel's producer is idle (no data, no watermarks for a while,
    so downstream leaves it out of its combined watermark) or active again."""

    idle: bool

    IDLE: ClassVar[WatermarkStatus]
    ACTIVE: ClassVar[WatermarkStatus]


WatermarkStatus.IDLE = WatermarkStatus(True)
WatermarkStatus.ACTIVE = WatermarkStatus(False)


@dataclasses.dataclass(frozen=True)
class EndOfPartition:
    """The producer finished: no buffer or event follows on this channel."""


@dataclasses.dataclass(frozen=True)
class EndOfData:
    """Flink's ``EndOfData``: the producer's operators finished; no record or watermark follows.

    The producer stays alive for its final checkpoint (FLIP-147), so barriers
    and then :class:`EndOfPartition` still follow on the channel.
    """


RuntimeEvent = (
    CheckpointBarrier
    | EventAnnouncement
    | CancelCheckpointMarker
    | Watermark
    | WatermarkStatus
    | EndOfPartition
    | EndOfData
)
"""Any event that can travel in a channel."""


@dataclasses.dataclass(frozen=True, slots=True)
class BufferOrEvent:
    """One element of a channel: exactly one of ``buffer`` or ``event`` is set.

    Attributes:
        buffer: a data buffer (one record batch).
        event: a runtime event.
        is_priority: the element overtook queued data (unaligned barrier,
            announcement); consumers handle it before older data.
        sequence_number: per-subpartition position assigned by the producer
            (0 where unknown); used by announcements and channel state.
    """

    buffer: pa.RecordBatch | None = None
    event: RuntimeEvent | None = None
    is_priority: bool = False
    sequence_number: int = 0

    def __post_init__(self) -> None:
        if (self.buffer is None) == (self.event is None):
            raise ValueError("a BufferOrEvent holds exactly one of buffer or event")

    @property
    def is_buffer(self) -> bool:
        """True for a data buffer, False for an event."""
        return self.buffer is not None


# -- wire encoding -------------------------------------------------------------


class _Tag(IntEnum):
    BARRIER = 1
    ANNOUNCEMENT = 2
    CANCEL = 3
    WATERMARK = 4
    END_OF_PARTITION = 5
    WATERMARK_STATUS = 6
    END_OF_DATA = 7


_HEADER = struct.Struct("<BB")
_BARRIER = struct.Struct("<qqBBq")
_LONG = struct.Struct("<q")
_BYTE = struct.Struct("<B")

# Stable wire codes: never reorder, only append.
_TYPE_CODES = {CheckpointKind.CHECKPOINT: 0, CheckpointKind.SAVEPOINT: 1}
_ALIGNMENT_CODES = {AlignmentType.ALIGNED: 0, AlignmentType.UNALIGNED: 1, AlignmentType.FORCED_ALIGNED: 2}
_TYPES_BY_CODE = {code: value for value, code in _TYPE_CODES.items()}
_ALIGNMENTS_BY_CODE = {code: value for value, code in _ALIGNMENT_CODES.items()}
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _barrier_payload(barrier: CheckpointBarrier) -> bytes:
    options = barrier.options
    timeout = options.aligned_checkpoint_timeout
    timeout_us = -1 if timeout is None else timeout // timedelta(microseconds=1)
    for name, value in (
        ("checkpoint_id", barrier.checkpoint_id),
        ("timestamp_ms", barrier.timestamp_ms),
        ("aligned_checkpoint_timeout (µs)", timeout_us),
    ):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise ValueError(f"cannot encode {name}={value}: outside the signed 64-bit range")
    return _BARRIER.pack(
        barrier.checkpoint_id,
        barrier.timestamp_ms,
        _TYPE_CODES[options.checkpoint_type],
        _ALIGNMENT_CODES[options.alignment],
        timeout_us,
    )


def _pack_long(name: str, value: int) -> bytes:
    if not isinstance(value, int) or not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"cannot encode {name}={value!r}: not a signed 64-bit integer")
    return _LONG.pack(value)


def encode_event(event: RuntimeEvent) -> bytes:
    """Encode ``event`` into the versioned binary wire format.

    Raises:
        TypeError: ``event`` is not a runtime event.
        ValueError: an integer field does not fit in a signed 64-bit integer.
    """
    if isinstance(event, CheckpointBarrier):
        return _HEADER.pack(ENCODING_VERSION, _Tag.BARRIER) + _barrier_payload(event)
    if isinstance(event, EventAnnouncement):
        if not isinstance(event.announced_event, CheckpointBarrier):
            raise TypeError(f"only checkpoint barriers can be announced, got {type(event.announced_event).__name__}")
        return (
            _HEADER.pack(ENCODING_VERSION, _Tag.ANNOUNCEMENT)
            + _pack_long("sequence_number", event.sequence_number)
            + encode_event(event.announced_event)
        )
    if isinstance(event, CancelCheckpointMarker):
        return _HEADER.pack(ENCODING_VERSION, _Tag.CANCEL) + _pack_long("checkpoint_id", event.checkpoint_id)
    if isinstance(event, Watermark):
        return _HEADER.pack(ENCODING_VERSION, _Tag.WATERMARK) + _pack_long("timestamp_ms", event.timestamp_ms)
    if isinstance(event, EndOfPartition):
        return _HEADER.pack(ENCODING_VERSION, _Tag.END_OF_PARTITION)
    if isinstance(event, WatermarkStatus):
        return _HEADER.pack(ENCODING_VERSION, _Tag.WATERMARK_STATUS) + _BYTE.pack(1 if event.idle else 0)
    if isinstance(event, EndOfData):
        return _HEADER.pack(ENCODING_VERSION, _Tag.END_OF_DATA)
    raise TypeError(
        f"cannot encode {type(event).__name__}: expected one of CheckpointBarrier, EventAnnouncement, "
        "CancelCheckpointMarker, Watermark, WatermarkStatus, EndOfPartition, EndOfData"
    )


def _expect_length(data: memoryview, expected: int, what: str) -> None:
    if len(data) != expected:
        raise EventDecodingError(f"malformed {what} event: payload is {len(data)} bytes, expected {expected}")


def _decode_barrier_payload(payload: memoryview) -> CheckpointBarrier:
    _expect_length(payload, _BARRIER.size, "barrier")
    checkpoint_id, timestamp_ms, type_code, alignment_code, timeout_us = _BARRIER.unpack(payload)
    try:
        checkpoint_type = _TYPES_BY_CODE[type_code]
        alignment = _ALIGNMENTS_BY_CODE[alignment_code]
    except KeyError:
        raise EventDecodingError(
            f"malformed barrier event: checkpoint type code {type_code} (valid {sorted(_TYPES_BY_CODE)}), "
            f"alignment code {alignment_code} (valid {sorted(_ALIGNMENTS_BY_CODE)})"
        ) from None
    if timeout_us < -1:
        raise EventDecodingError(f"malformed barrier event: aligned checkpoint timeout {timeout_us} µs")
    timeout = None if timeout_us == -1 else timedelta(microseconds=timeout_us)
    try:
        options = CheckpointOptions(
            checkpoint_type=checkpoint_type, alignment=alignment, aligned_checkpoint_timeout=timeout
        )
    except (ValueError, OverflowError) as e:
        raise EventDecodingError(f"malformed barrier event: {e}") from None
    return CheckpointBarrier(checkpoint_id, timestamp_ms, options)


def decode_event(data: bytes | bytearray | memoryview) -> RuntimeEvent:
    """Decode bytes written by :func:`encode_event`.

    Raises:
        EventDecodingError: unsupported version, unknown tag, invalid enum code,
            or truncated/trailing bytes. The message names the bad value.
    """
    view = memoryview(data).cast("B") if not isinstance(data, bytes) else memoryview(data)
    if len(view) < _HEADER.size:
        raise EventDecodingError(f"malformed event: {len(view)} bytes, shorter than the 2-byte header")
    version, tag = _HEADER.unpack(view[: _HEADER.size])
    if version != ENCODING_VERSION:
        raise EventDecodingError(
            f"unsupported event encoding version {version}; this build reads version {ENCODING_VERSION}"
        )
    payload = view[_HEADER.size :]
    if tag == _Tag.BARRIER:
        return _decode_barrier_payload(payload)
    if tag == _Tag.ANNOUNCEMENT:
        if len(payload) < _LONG.size:
            raise EventDecodingError("malformed announcement event: missing sequence number")
        (sequence_number,) = _LONG.unpack(payload[: _LONG.size])
        inner = decode_event(payload[_LONG.size :])
        if not isinstance(inner, CheckpointBarrier):
            raise EventDecodingError(
                f"malformed announcement event: announces {type(inner).__name__}, expected CheckpointBarrier"
            )
        return EventAnnouncement(inner, sequence_number)
    if tag == _Tag.CANCEL:
        _expect_length(payload, _LONG.size, "cancel-checkpoint")
        return CancelCheckpointMarker(_LONG.unpack(payload)[0])
    if tag == _Tag.WATERMARK:
        _expect_length(payload, _LONG.size, "watermark")
        return Watermark(_LONG.unpack(payload)[0])
    if tag == _Tag.END_OF_PARTITION:
        _expect_length(payload, 0, "end-of-partition")
        return EndOfPartition()
    if tag == _Tag.WATERMARK_STATUS:
        _expect_length(payload, _BYTE.size, "watermark-status")
        (code,) = _BYTE.unpack(payload)
        if code not in (0, 1):
            raise EventDecodingError(f"malformed watermark-status event: status code {code} (valid 0, 1)")
        return WatermarkStatus(code == 1)
    if tag == _Tag.END_OF_DATA:
        _expect_length(payload, 0, "end-of-data")
        return EndOfData()
    raise EventDecodingError(
        f"unknown event tag {tag}; valid tags are " + ", ".join(f"{t.value} ({t.name})" for t in _Tag)
    )
