"""The partition server's writes to a Flight stream never overlap (two at once abort inside Arrow)."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

from flinklike_spark._runtime.network.partition_server import _SubpartitionStream

pytestmark = pytest.mark.timeout(30)


class OverlapDetectingWriter:
    """Stands in for the Flight writer: records whether two ``write_metadata`` calls ever overlap."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.active = 0
        self.overlapped = False
        self.messages: list[bytes] = []

    def write_metadata(self, message: pa.Buffer) -> None:
        with self._lock:
            self.active += 1
            self.overlapped |= self.active > 1
        time.sleep(0.005)  # a write takes a while: another thread's write would fall into it
        with self._lock:
            self.active -= 1
            self.messages.append(message.to_pybytes())


def test_control_messages_and_data_are_written_one_at_a_time():
    # seen in CI: the call's thread sent CLOSING while the credit reader sent data, and Arrow aborted
    writer = OverlapDetectingWriter()
    stream = _SubpartitionStream(partition_manager=None, context=None, reader=None, writer=writer)
    stream.stop()
    start = threading.Barrier(3)

    def data() -> None:
        start.wait()
        for i in range(20):
            stream._send(pa.py_buffer(b"data %d" % i))

    def closing() -> None:
        start.wait()
        for _ in range(20):
            stream._send_closing_if_stopping()

    def error() -> None:
        start.wait()
        for _ in range(20):
            stream._send_error(RuntimeError("boom"))

    threads = [threading.Thread(target=f) for f in (data, closing, error)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert len(writer.messages) == 60
    assert not writer.overlapped
