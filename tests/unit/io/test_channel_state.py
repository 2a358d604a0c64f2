"""ChannelStateWriter: per-checkpoint, per-channel recording of in-flight buffers."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest

from flinklike_spark._runtime.io.channel_state import (
    CHANNEL_STATE_TRANSITIONS,
    SEQUENCE_NUMBER_UNKNOWN,
    ChannelStateWriter,
    ChannelStateWriterStatus,
    InputChannelInfo,
    ResultSubpartitionInfo,
)
from flinklike_spark.errors import CheckpointDeclinedError, CheckpointDeclineReason, IllegalStateTransition

IN0 = InputChannelInfo(0, 0)
IN1 = InputChannelInfo(0, 1)
IN_G1 = InputChannelInfo(1, 0)
OUT0 = ResultSubpartitionInfo(0, 0)


def batch(v: int) -> pa.RecordBatch:
    return pa.record_batch([pa.array([v])], names=["v"])


def values(batches) -> list[int]:
    return [b.column(0)[0].as_py() for b in batches]


def test_records_input_and_output_per_channel_in_call_order_and_hands_result_to_sink():
    sunk = []
    w = ChannelStateWriter(sink=sunk.append)
    w.start(7)
    w.add_input_data(7, IN1, 5, [batch(50)])
    w.add_input_data(7, IN0, 3, [batch(30), batch(31)])
    w.add_input_data(7, IN1, 4, [batch(40)])  # call order wins over sequence numbers
    w.add_input_data(7, IN_G1, SEQUENCE_NUMBER_UNKNOWN, [batch(1)])
    w.add_output_data(7, OUT0, 0, [batch(9)])
    w.finish_output(7)
    assert w.status(7) is ChannelStateWriterStatus.OUTPUT_FINISHED
    assert sunk == []
    w.finish_input(7)

    result = w.get_result(7)
    assert sunk == [result]
    assert result.checkpoint_id == 7
    assert values(result.input_batches(IN0)) == [30, 31]
    assert values(result.input_batches(IN1)) == [50, 40]
    assert [b.sequence_number for b in result.input_buffers[IN1]] == [5, 4]
    assert values(result.input_batches(IN_G1)) == [1]
    assert values(result.output_batches(OUT0)) == [9]
    assert result.input_batches(InputChannelInfo(3, 3)) == []
    assert w.status(7) is ChannelStateWriterStatus.COMPLETED


def test_finish_in_either_order_completes_once_and_is_idempotent():
    sunk = []
    w = ChannelStateWriter(sink=sunk.append)
    w.start(1)
    w.finish_input(1)
    w.finish_input(1)
    assert w.status(1) is ChannelStateWriterStatus.INPUT_FINISHED
    w.finish_output(1)
    w.finish_output(1)
    assert len(sunk) == 1 and sunk[0].is_empty


def test_checkpoints_are_independent():
    w = ChannelStateWriter()
    w.start(1)
    w.start(2)
    w.add_input_data(1, IN0, 0, [batch(1)])
    w.add_input_data(2, IN0, 0, [batch(2)])
    w.abort(1, CheckpointDeclinedError("x", checkpoint_id=1, reason=CheckpointDeclineReason.SUBSUMED))
    w.finish_input(2)
    w.finish_output(2)
    assert values(w.get_result(2).input_batches(IN0)) == [2]
    with pytest.raises(CheckpointDeclinedError) as e:
        w.get_result(1)
    assert e.value.reason is CheckpointDeclineReason.SUBSUMED
    assert e.value.checkpoint_id == 1


def test_abort_drops_data_ignores_late_adds_and_never_reaches_the_sink():
    sunk = []
    w = ChannelStateWriter(sink=sunk.append)
    w.start(3)
    w.add_input_data(3, IN0, 0, [batch(1)])
    cause = OSError("disk")
    w.abort(3, cause)
    w.add_input_data(3, IN0, 1, [batch(2)])  # gate still recording: ignored
    w.finish_input(3)
    w.finish_output(3)
    assert sunk == []
    assert w.status(3) is ChannelStateWriterStatus.ABORTED
    with pytest.raises(CheckpointDeclinedError) as e:
        w.get_result(3)
    assert e.value.__cause__ is cause
    assert e.value.reason is CheckpointDeclineReason.IO_FAILURE


def test_abort_of_unknown_or_completed_checkpoint_is_a_noop():
    w = ChannelStateWriter()
    w.abort(99, OSError("x"))
    assert w.status(99) is None
    w.start(1)
    w.finish_input(1)
    w.finish_output(1)
    w.abort(1, OSError("late"))
    assert w.get_result(1).checkpoint_id == 1


def test_misuse_raises_with_clear_messages():
    w = ChannelStateWriter()
    with pytest.raises(LookupError, match="not started"):
        w.add_input_data(1, IN0, 0, [batch(1)])
    w.start(1)
    with pytest.raises(ValueError, match="already started"):
        w.start(1)
    with pytest.raises(LookupError, match="not complete yet"):
        w.get_result(1)
    w.finish_input(1)
    with pytest.raises(IllegalStateTransition, match="finish_input"):
        w.add_input_data(1, IN0, 0, [batch(1)])
    w.add_output_data(1, OUT0, 0, [batch(2)])  # output side still open
    with pytest.raises(LookupError, match="known checkpoints"):
        w.get_result(2)


def test_failing_sink_aborts_the_checkpoint_and_propagates():
    def sink(result):
        raise OSError("delta unavailable")

    w = ChannelStateWriter(sink=sink)
    w.start(1)
    w.finish_input(1)
    with pytest.raises(OSError, match="delta unavailable"):
        w.finish_output(1)
    assert w.status(1) is ChannelStateWriterStatus.ABORTED


def test_release_forgets_the_checkpoint():
    w = ChannelStateWriter()
    w.start(1)
    w.finish_input(1)
    w.finish_output(1)
    w.release(1)
    assert w.status(1) is None
    w.start(1)  # may be started again after release
    assert w.status(1) is ChannelStateWriterStatus.RECORDING


def test_transition_table_covers_every_status_and_terminal_states_are_empty():
    assert set(CHANNEL_STATE_TRANSITIONS) == set(ChannelStateWriterStatus)
    assert CHANNEL_STATE_TRANSITIONS[ChannelStateWriterStatus.COMPLETED] == frozenset()
    assert CHANNEL_STATE_TRANSITIONS[ChannelStateWriterStatus.ABORTED] == frozenset()


def test_channel_infos_validate_and_order():
    with pytest.raises(ValueError):
        InputChannelInfo(-1, 0)
    with pytest.raises(ValueError):
        ResultSubpartitionInfo(0, -2)
    assert sorted([IN_G1, IN1, IN0]) == [IN0, IN1, IN_G1]


def test_declined_error_pickles_with_reason():
    e = CheckpointDeclinedError("m", checkpoint_id=4, reason=CheckpointDeclineReason.INPUT_END_OF_STREAM)
    r = pickle.loads(pickle.dumps(e))
    assert (str(r), r.checkpoint_id, r.reason) == ("m", 4, CheckpointDeclineReason.INPUT_END_OF_STREAM)
