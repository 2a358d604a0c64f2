"""Events: value semantics and the binary wire encoding."""

from __future__ import annotations

import pickle
from datetime import timedelta

import pyarrow as pa
import pytest

from checkpointing.schemas import CheckpointKind
from flinklike_spark._runtime.network.events import (
    ENCODING_VERSION,
    AlignmentType,
    BufferOrEvent,
    CancelCheckpointMarker,
    CheckpointBarrier,
    CheckpointOptions,
    EndOfData,
    EndOfPartition,
    EventAnnouncement,
    Watermark,
    decode_event,
    encode_event,
)
from flinklike_spark.errors import EventDecodingError, NetworkError

ALIGNED_WITH_TIMEOUT = CheckpointOptions(
    checkpoint_type=CheckpointKind.CHECKPOINT,
    alignment=AlignmentType.ALIGNED,
    aligned_checkpoint_timeout=timedelta(milliseconds=250),
)

EVENTS = [
    CheckpointBarrier(7, 1_700_000_000_123, ALIGNED_WITH_TIMEOUT),
    CheckpointBarrier(8, 5, CheckpointOptions(alignment=AlignmentType.UNALIGNED)),
    CheckpointBarrier(
        2**62,
        -1,
        CheckpointOptions(checkpoint_type=CheckpointKind.SAVEPOINT, alignment=AlignmentType.FORCED_ALIGNED),
    ),
    EventAnnouncement(CheckpointBarrier(9, 10, ALIGNED_WITH_TIMEOUT), 42),
    CancelCheckpointMarker(11),
    Watermark(-(2**63)),
    Watermark.MAX_WATERMARK,
    EndOfPartition(),
    EndOfData(),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_round_trip_every_event_type(event):
    data = encode_event(event)
    assert isinstance(data, bytes)
    assert data[0] == ENCODING_VERSION
    decoded = decode_event(data)
    assert decoded == event
    assert type(decoded) is type(event)
    assert decode_event(memoryview(bytearray(data))) == event


def test_encoding_is_compact_and_not_pickle():
    data = encode_event(EVENTS[0])
    assert len(data) < 40
    assert not data.startswith(b"\x80")  # pickle protocol marker


@pytest.mark.parametrize(
    "garbage",
    [
        b"",
        b"\x01",
        bytes([ENCODING_VERSION, 99]),
        bytes([ENCODING_VERSION + 1, 5]),
        encode_event(Watermark(3))[:-1],
        encode_event(Watermark(3)) + b"\x00",
        encode_event(EndOfPartition()) + b"x",
        encode_event(EndOfData()) + b"x",
        b"\x80\x04\x95garbage-pickle",
        # barrier with an unknown alignment code
        encode_event(CheckpointBarrier(1, 1))[:19] + b"\x09" + encode_event(CheckpointBarrier(1, 1))[20:],
        # announcement of something that is not a barrier
        bytes([ENCODING_VERSION, 2]) + (5).to_bytes(8, "little") + encode_event(Watermark(1)),
    ],
)
def test_decode_rejects_garbage(garbage):
    with pytest.raises(EventDecodingError) as info:
        decode_event(garbage)
    assert isinstance(info.value, NetworkError)


def test_unknown_tag_message_names_tag_and_valid_tags():
    with pytest.raises(EventDecodingError, match=r"unknown event tag 99.*WATERMARK"):
        decode_event(bytes([ENCODING_VERSION, 99]))


def test_encode_rejects_non_events_and_out_of_range():
    with pytest.raises(TypeError, match="cannot encode str"):
        encode_event("barrier")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="64-bit"):
        encode_event(Watermark(2**63))


def test_checkpoint_options_semantics():
    aligned = ALIGNED_WITH_TIMEOUT
    assert not aligned.is_unaligned and aligned.needs_alignment and aligned.is_timeoutable
    unaligned = aligned.as_unaligned()
    assert unaligned.is_unaligned and not unaligned.needs_alignment
    assert unaligned.aligned_checkpoint_timeout == aligned.aligned_checkpoint_timeout
    assert unaligned.as_unaligned() is unaligned
    assert CheckpointOptions(alignment=AlignmentType.FORCED_ALIGNED).needs_alignment
    savepoint = CheckpointOptions(checkpoint_type=CheckpointKind.SAVEPOINT)
    with pytest.raises(ValueError, match="savepoint"):
        savepoint.as_unaligned()
    with pytest.raises(ValueError, match="savepoint"):
        CheckpointOptions(checkpoint_type=CheckpointKind.SAVEPOINT, alignment=AlignmentType.UNALIGNED)
    with pytest.raises(ValueError, match=">= 0"):
        CheckpointOptions(aligned_checkpoint_timeout=timedelta(seconds=-1))
    with pytest.raises(TypeError):
        CheckpointOptions(CheckpointKind.CHECKPOINT)  # type: ignore[misc]  # keyword-only


def test_barrier_as_unaligned_keeps_identity_fields():
    barrier = CheckpointBarrier(3, 99, ALIGNED_WITH_TIMEOUT)
    assert not barrier.is_unaligned
    converted = barrier.as_unaligned()
    assert converted.is_unaligned
    assert (converted.checkpoint_id, converted.timestamp_ms) == (3, 99)
    assert converted.as_unaligned() is converted
    assert barrier.options.alignment is AlignmentType.ALIGNED  # original untouched


def test_events_are_frozen_and_picklable():
    for event in EVENTS:
        assert pickle.loads(pickle.dumps(event)) == event
    with pytest.raises(AttributeError):
        EVENTS[0].checkpoint_id = 1  # type: ignore[misc]


def test_buffer_or_event():
    batch = pa.record_batch({"x": [1, 2]})
    buffer = BufferOrEvent(buffer=batch)
    assert buffer.is_buffer and buffer.event is None and not buffer.is_priority and buffer.sequence_number == 0
    event = BufferOrEvent(event=EndOfPartition(), is_priority=True, sequence_number=4)
    assert not event.is_buffer and event.is_priority and event.sequence_number == 4
    with pytest.raises(ValueError, match="exactly one"):
        BufferOrEvent()
    with pytest.raises(ValueError, match="exactly one"):
        BufferOrEvent(buffer=batch, event=EndOfPartition())
