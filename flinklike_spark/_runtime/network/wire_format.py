"""The data plane's wire format between a consumer's RemoteInputChannel and a producer's PartitionRequestServer.

The descriptor is the path ``[PROTOCOL, partition_id,
subpartition, wait_ms]``. Every message is Flight ``app_metadata`` only (no
Flight data), starting with a 16-byte little-endian header ``<BB6xq``: kind,
flags (bit 0 = priority), 6 padding bytes (keeps the Arrow payload 8-byte
aligned), the producer's sequence number. Server to consumer:

    ATTACHED  the reader is attached; empty payload
    BUFFER    a data buffer: one Arrow IPC *stream* (schema + batch), so
              batches of one channel may differ in schema and may hold
              dictionary columns
    BUFFERS   consecutive non-priority data buffers with one schema, sent
              together when the consumer's credit covers them all: ``<i``
              count, ``count`` ``<q`` sequence numbers, one IPC stream with
              ``count`` batches; each costs one credit like a BUFFER
    EVENT     :func:`~flinklike_spark._runtime.network.events.encode_event` bytes
    ERROR     UTF-8 ``"<ErrorType>\\n<message>"`` (partition not found, producer failed)
    CLOSING   the producer's node shuts down; UTF-8 reason

Consumer to server: ``<Bxxxi`` = (CREDIT, amount). Nothing on the data plane
is pickled. The consumer half-closes its side after ``EndOfPartition``,
``ERROR`` or ``CLOSING``, which lets the server's credit reader finish before
the server returns from the call.

Both ends import this module; the protocol's flow control is described in
:mod:`flinklike_spark._runtime.network.remote_input_channel`.
"""

from __future__ import annotations

import struct

import pyarrow as pa
import pyarrow.flight as flight

from flinklike_spark._runtime.network.events import BufferOrEvent, encode_event
from flinklike_spark.errors import BrokenChannelError, NetworkError, PartitionNotFoundError, ProducerFailedError

__all__ = [
    "ATTACHED",
    "BUFFER",
    "BUFFERS",
    "CLOSING",
    "COUNT",
    "CREDIT",
    "ERROR",
    "EVENT",
    "FLAG_PRIORITY",
    "FLIGHT_ERRORS",
    "HEADER",
    "KIND_NAMES",
    "MSG_CREDIT",
    "PROTOCOL",
    "WAIT_SLICE",
    "WIRE_ERRORS",
    "costs_credit",
    "encode_buffers",
    "encode_element",
    "header",
]

PROTOCOL = b"flinklike-subpartition/v1"
"""First descriptor path element of a subpartition request."""

HEADER = struct.Struct("<BB6xq")
CREDIT = struct.Struct("<B3xi")

ATTACHED = 0
BUFFER = 1
EVENT = 2
ERROR = 3
CLOSING = 4
BUFFERS = 5
KIND_NAMES = {
    ATTACHED: "ATTACHED", BUFFER: "BUFFER", EVENT: "EVENT", ERROR: "ERROR", CLOSING: "CLOSING",
    BUFFERS: "BUFFERS",
}  # fmt: skip
COUNT = struct.Struct("<i")

MSG_CREDIT = 1
FLAG_PRIORITY = 1

WAIT_SLICE = 0.5  # timed waits re-check cancellation and shutdown this often

# Errors the server reports by name; anything else arrives as BrokenChannelError.
WIRE_ERRORS: dict[str, type[NetworkError]] = {
    "BrokenChannelError": BrokenChannelError,
    "PartitionNotFoundError": PartitionNotFoundError,
    "ProducerFailedError": ProducerFailedError,  # the consumer ends CANCELED: the producer's failure counts
}

FLIGHT_ERRORS = (flight.FlightError, pa.ArrowException, OSError)


def header(kind: int, sequence_number: int = 0, *, priority: bool = False) -> bytes:
    return HEADER.pack(kind, FLAG_PRIORITY if priority else 0, sequence_number)


def encode_element(element: BufferOrEvent) -> pa.Buffer:
    if element.buffer is not None:
        sink = pa.BufferOutputStream()
        sink.write(header(BUFFER, element.sequence_number, priority=element.is_priority))
        with pa.ipc.new_stream(sink, element.buffer.schema) as ipc_writer:
            ipc_writer.write_batch(element.buffer)
        return sink.getvalue()
    payload = encode_event(element.event)
    return pa.py_buffer(header(EVENT, element.sequence_number, priority=element.is_priority) + payload)


def encode_buffers(elements: list[BufferOrEvent]) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    sink.write(header(BUFFERS, elements[0].sequence_number))
    sink.write(COUNT.pack(len(elements)))
    sink.write(struct.pack(f"<{len(elements)}q", *(e.sequence_number for e in elements)))
    with pa.ipc.new_stream(sink, elements[0].buffer.schema) as ipc_writer:
        for element in elements:
            ipc_writer.write_batch(element.buffer)
    return sink.getvalue()


def costs_credit(element: BufferOrEvent) -> bool:
    return not element.is_priority
