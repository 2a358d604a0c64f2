"""WatermarkValve with watermark statuses (Flink's StatusWatermarkValve), and the status event's encoding."""

from __future__ import annotations

import pytest

from flinklike_spark._runtime.network.events import WatermarkStatus, decode_event, encode_event
from flinklike_spark._runtime.streaming.stream_task import WatermarkValve
from flinklike_spark.errors import EventDecodingError


def test_an_idle_channel_is_left_out_and_rejoins_once_it_caught_up():
    valve = WatermarkValve(3)
    assert valve.input_watermark(0, 100) is None
    assert valve.input_watermark(1, 50) is None
    assert valve.input_watermark(2, 70) == 50
    # channel 1 goes idle: the minimum of the others
    assert valve.input_status(1, True) == (70, None)
    assert valve.input_watermark(1, 60) is None  # an idle channel's watermarks are ignored
    assert valve.input_watermark(2, 120) == 100
    # active again but behind (60 < 100): not aligned, it does not pull the watermark back
    assert valve.input_status(1, False) == (None, None)
    assert valve.input_watermark(0, 200) == 120
    assert valve.input_watermark(1, 110) is None  # still behind 120
    assert valve.input_watermark(1, 130) is None  # caught up: aligned again, now holds the minimum
    assert valve.input_watermark(2, 300) == 130
    assert valve.current == 130


def test_all_channels_idle_makes_the_output_idle_at_the_highest_watermark():
    valve = WatermarkValve(2)
    valve.input_watermark(0, 10)
    assert valve.input_watermark(1, 40) == 10
    assert valve.input_status(0, True) == (40, None)
    assert valve.input_status(1, True) == (None, True)
    assert valve.idle
    assert valve.input_status(0, False) == (None, False)  # the first active channel: active again
    assert valve.input_status(0, False) == (None, None)  # no change


def test_an_idle_channel_that_finished_does_not_count():
    valve = WatermarkValve(2)
    valve.input_watermark(0, 10)
    valve.input_status(1, True)
    assert valve.channel_finished(1) is None
    assert valve.input_status(1, False) == (None, None)
    assert valve.input_watermark(0, 20) == 20


def test_watermark_status_events_round_trip_and_bad_codes_are_named():
    for status in (WatermarkStatus.IDLE, WatermarkStatus.ACTIVE):
        assert decode_event(encode_event(status)) == status
    with pytest.raises(EventDecodingError, match="status code 7"):
        decode_event(encode_event(WatermarkStatus.IDLE)[:-1] + b"\x07")
