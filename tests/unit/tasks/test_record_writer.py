"""RecordWriterOutput: buffer sizing, flushing and order per channel."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from flinklike_spark._runtime.graph.job_graph import PartitionerKind, PartitionerSpec
from flinklike_spark._runtime.network.partitioner import create_channel_selector
from flinklike_spark._runtime.tasks.record_writer import RecordWriterOutput
from tests.support.clocks import ManualClock

pytestmark = pytest.mark.timeout(30)

SEGMENT = 32 * 1024  # 2,048 rows of two int64 columns


class RecordingPartition:
    """Collects emitted buffers per subpartition."""

    def __init__(self, num_subpartitions: int) -> None:
        self.num_subpartitions = num_subpartitions
        self.buffers: list[list[pa.RecordBatch]] = [[] for _ in range(num_subpartitions)]

    def emit(self, channel: int, batch: pa.RecordBatch) -> None:
        self.buffers[channel].append(batch)


def _batch(start: int, rows: int) -> pa.RecordBatch:
    seq = np.arange(start, start + rows, dtype=np.int64)
    return pa.RecordBatch.from_arrays([pa.array(seq % 997), pa.array(seq)], names=["key", "seq"])


def _writer(kind: PartitionerKind, channels: int, clock=None) -> tuple[RecordWriterOutput, RecordingPartition]:
    partition = RecordingPartition(channels)
    selector = create_channel_selector(PartitionerSpec(kind=kind, key_field="key"), channels, subtask_index=0)
    kwargs = {} if clock is None else {"clock": clock}
    return RecordWriterOutput(partition, selector, None, segment_size=SEGMENT, **kwargs), partition


def test_hash_split_emits_only_full_buffers_until_flushed_and_keeps_order_per_channel():
    writer, partition = _writer(PartitionerKind.HASH, 2)
    batches = [_batch(i * 4096, 4096) for i in range(50)]
    for batch in batches:
        writer.emit_batch(batch)
    for buffers in partition.buffers:
        assert buffers, "a channel received no full buffer"
        # No fragments: every buffer sent before the flush is one full segment.
        assert {b.num_rows for b in buffers} == {SEGMENT // 16}
    writer.flush()
    assert writer.flush_deadline(0.1) is None
    # The selector keeps row order within a channel, so splitting all rows at once gives
    # what each channel must have received, in order.
    everything = pa.Table.from_batches(batches).combine_chunks().to_batches()[0]
    selector = create_channel_selector(PartitionerSpec(kind=PartitionerKind.HASH, key_field="key"), 2,
                                       subtask_index=0)  # fmt: skip
    expected = dict(selector.split(everything))
    for channel, buffers in enumerate(partition.buffers):
        assert all(b.nbytes <= SEGMENT for b in buffers)
        got = pa.Table.from_batches(buffers).column("seq").to_pylist()
        assert got == expected[channel].column("seq").to_pylist()
    assert writer.records_out == 50 * 4096


def test_partial_buffer_waits_for_the_buffer_timeout():
    clock = ManualClock(100.0)
    writer, partition = _writer(PartitionerKind.FORWARD, 1, clock)
    writer.emit_batch(_batch(0, 2048 + 10))  # one full segment and 10 rows
    assert [b.num_rows for b in partition.buffers[0]] == [2048]
    assert writer.flush_deadline(0.1) == pytest.approx(100.1)
    writer.flush()
    assert [b.num_rows for b in partition.buffers[0]] == [2048, 10]
    assert writer.flush_deadline(0.1) is None


def test_pieces_below_a_segment_collect_into_one_buffer():
    writer, partition = _writer(PartitionerKind.FORWARD, 1)
    for i in range(4):
        writer.emit_batch(_batch(i * 500, 500))
    assert partition.buffers[0] == []
    writer.emit_batch(_batch(2000, 500))  # 2,500 rows pending: one full buffer, 452 wait
    assert [b.num_rows for b in partition.buffers[0]] == [2048]
    writer.flush()
    assert [b.num_rows for b in partition.buffers[0]] == [2048, 452]
    assert pa.Table.from_batches(partition.buffers[0]).column("seq").to_pylist() == list(range(2500))


def test_finish_flushes_a_large_batch_in_segment_sized_buffers():
    writer, partition = _writer(PartitionerKind.FORWARD, 1)
    writer.emit_batch(_batch(0, 10 * 2048 + 7))
    writer.flush()
    sizes = [b.num_rows for b in partition.buffers[0]]
    assert sizes == [2048] * 10 + [7]
