"""The client's side of ``execute_and_collect``: deliveries are kept once per batch id, in order, until closed."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from flinklike_spark._runtime.collect_results import CollectResults, decode_batch, encode_batch
from flinklike_spark.connector_api import CommitterContext, SinkWriterContext
from flinklike_spark.datastream.collect_stream import CheckpointedCollectSink, StreamingCollectSink
from flinklike_spark.errors import ConfigurationError


def batch(*values):
    return pa.record_batch({"v": list(values)})


def test_encoding_round_trips_records():
    assert decode_batch(encode_batch(batch(1, 2, 3))) == [{"v": 1}, {"v": 2}, {"v": 3}]


def test_a_batch_delivered_twice_is_kept_once_and_order_is_delivery_order():
    results = CollectResults()
    assert results.deliver("c", "00000-00000-000000001", encode_batch(batch(1, 2)))
    assert results.deliver("c", "00000-00000-000000002", encode_batch(batch(3)))
    assert results.deliver("c", "00000-00000-000000001", encode_batch(batch(1, 2)))  # a re-commit
    assert [r["v"] for r in results.buffer("c").take(0)] == [1, 2, 3]
    assert results.buffer("c").take(0) == []


def test_after_close_deliveries_are_refused_and_take_returns_nothing():
    results = CollectResults()
    results.deliver("c", "a", encode_batch(batch(1)))
    results.buffer("c").close()
    assert not results.deliver("c", "b", encode_batch(batch(2)))
    assert results.buffer("c").take(1.0) == []  # closed: no waiting either


def test_take_wakes_up_on_a_delivery_from_another_thread():
    results = CollectResults()
    timer = threading.Timer(0.05, lambda: results.deliver("c", "a", encode_batch(batch(7))))
    timer.start()
    try:
        assert results.buffer("c").take(5.0) == [{"v": 7}]
    finally:
        timer.join()


class Recorder:
    def __init__(self, accept=True):
        self.calls, self.accept = [], accept

    def deliver(self, collect_id, batch_id, payload):
        self.calls.append((collect_id, batch_id, decode_batch(payload)))
        return self.accept


def test_two_phase_sink_delivers_committed_batches_only_under_stable_ids():
    channel = Recorder()
    sink = CheckpointedCollectSink("c")
    writer = sink.create_writer(SinkWriterContext(subtask_index=1, parallelism=2, attempt_number=3,
                                                  result_channel=channel))  # fmt: skip
    writer.write(batch(1))
    writer.write(batch())  # empty batches are not published
    writer.write(batch(2))
    assert channel.calls == []  # staged until the checkpoint completes
    committables = writer.prepare_commit(1)
    assert writer.prepare_commit(2) == []
    sink.create_committer_with(CommitterContext(result_channel=channel)).commit(committables)
    assert channel.calls == [("c", "00001-00003-000000001", [{"v": 1}]), ("c", "00001-00003-000000002", [{"v": 2}])]


def test_a_closed_reader_stops_the_commit_and_a_missing_channel_is_a_clear_error():
    channel = Recorder(accept=False)
    sink = CheckpointedCollectSink("c")
    writer = sink.create_writer(SinkWriterContext(subtask_index=0, parallelism=1, result_channel=channel))
    writer.write(batch(1))
    writer.write(batch(2))
    sink.create_committer_with(CommitterContext(result_channel=channel)).commit(writer.prepare_commit(1))
    assert len(channel.calls) == 1
    with pytest.raises(ConfigurationError, match="no result channel"):
        sink.create_committer()
    with pytest.raises(ConfigurationError, match="no result channel"):
        StreamingCollectSink("c").create_writer(SinkWriterContext(subtask_index=0, parallelism=1)).write(batch(1))
