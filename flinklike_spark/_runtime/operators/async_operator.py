"""AsyncWaitOperator: Flink's ``AsyncWaitOperator`` with an asyncio loop beside the task thread.

The loop runs in one daemon thread per operator; the task thread submits
``async_invoke`` coroutines to it and takes the finished results back, so user
output, ``timeout()`` and every state change stay on the task thread. While
requests are in flight the operator asks for a processing-time wake-up every
millisecond (``next_processing_timer``), which lets the mailbox loop emit
results when no input arrives. At most ``capacity`` requests are in flight: a
full queue blocks the task thread until one completes (backpressure, as in
Flink). A watermark, the end of input and a checkpoint's synchronous part see
the queue as it is: the watermark and ``finish`` wait for the requests before
them, the checkpoint stores the input rows (with their event timestamps) of
every request not yet emitted (operator state ``async_in_flight``), and a
restore sends them again. Results keep their input's event timestamp.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import threading
import time
from typing import TYPE_CHECKING, Any

from checkpointing.schemas import StateKind
from checkpointing.state_snapshots import OperatorStateSnapshot
from flinklike_spark._runtime.operators.stream_operator import (
    OperatorRuntimeContext,
    OperatorSnapshot,
    RestoredState,
    StreamOperator,
    call_close,
    call_open,
)
from flinklike_spark._runtime.record_timestamps import Timestamps
from flinklike_spark.common.types import copy_record

__all__ = ["AsyncOperatorDescriptor", "AsyncWaitOperator"]

if TYPE_CHECKING:  # pragma: no cover
    from flinklike_spark._runtime.operators.operator_spec import OperatorSpec

_IN_FLIGHT = "async_in_flight"
_TIMED_OUT = object()


@dataclasses.dataclass(kw_only=True)
class AsyncOperatorDescriptor:
    function: Any
    timeout_ms: int
    capacity: int
    ordered: bool


class AsyncWaitOperator(StreamOperator):
    def __init__(self, spec: OperatorSpec) -> None:
        super().__init__(spec)
        d: AsyncOperatorDescriptor = spec.function
        self.function = d.function
        self.timeout = d.timeout_ms / 1000
        self.capacity = d.capacity
        self.ordered = d.ordered
        #: (input row, its event timestamp, the request) in arrival order
        self._queue: collections.deque[tuple[dict, int | None, concurrent.futures.Future]] = collections.deque()
        self._restored: list[tuple[dict, int | None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def initialize_state(self, restored: RestoredState | None) -> None:
        if restored is None:
            return
        ctx = self.context
        mine = [
            e
            for e in restored.operator
            if e.state_name == _IN_FLIGHT and e.subtask % ctx.parallelism == ctx.subtask_index
        ]
        self._restored = [e.value for e in sorted(mine, key=lambda e: (e.subtask, e.key))]

    def open(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"async-{self.name}", daemon=True)
        self._thread.start()
        call_open(self.function, OperatorRuntimeContext(self.context, None, self.name))
        restored, self._restored = self._restored, []
        if restored:
            self.process_rows([row for row, _ in restored], [timestamp for _, timestamp in restored])

    def close(self) -> None:
        try:
            call_close(self.function)
        finally:
            for _, _, future in self._queue:
                future.cancel()
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(timeout=5)
                self._loop.close()
                self._loop = None

    # -- requests -------------------------------------------------------------------------------

    async def _invoke(self, row: dict) -> Any:
        try:
            return await asyncio.wait_for(self.function.async_invoke(row), self.timeout)
        except TimeoutError:
            return _TIMED_OUT

    def _results(self, row: dict, future: concurrent.futures.Future) -> list:
        result = future.result()  # re-raises the request's exception on the task thread
        if result is _TIMED_OUT:
            result = self.function.timeout(row)
        return list(result) if result is not None else []

    def _drain(self, *, block_until: int | None = None) -> None:
        """Emit what is complete; with ``block_until``, first wait until at most that many are in flight."""
        out: list = []
        out_ts: list = []

        def take(row: dict, timestamp: int | None, future: concurrent.futures.Future) -> None:
            results = self._results(row, future)
            out.extend(results)
            out_ts.extend([timestamp] * len(results))

        queue = self._queue
        while True:
            if self.ordered:
                while queue and queue[0][2].done():
                    take(*queue.popleft())
            else:
                done = [entry for entry in queue if entry[2].done()]
                for entry in done:
                    queue.remove(entry)
                    take(*entry)
            if block_until is None or len(queue) <= block_until:
                break
            waiting = [queue[0][2]] if self.ordered else [f for _, _, f in queue]
            concurrent.futures.wait(waiting, timeout=1.0, return_when=concurrent.futures.FIRST_COMPLETED)
        if out:
            self.output.emit_rows(out, out_ts)

    def process_rows(self, rows: list[dict], timestamps: Timestamps = None) -> None:
        loop = self._loop
        for row, timestamp in zip(rows, timestamps or [None] * len(rows), strict=True):
            if len(self._queue) >= self.capacity:
                self._drain(block_until=self.capacity - 1)
            self._queue.append((row, timestamp, asyncio.run_coroutine_threadsafe(self._invoke(row), loop)))
        self._drain()

    def process_watermark(self, timestamp: int) -> None:
        self._drain(block_until=0)
        self.output.emit_watermark(timestamp)

    def next_processing_timer(self) -> int | None:
        return int(time.time() * 1000) + 1 if self._queue else None

    def on_processing_time(self, now_ms: int) -> None:
        if self._queue:
            self._drain()

    def finish(self) -> None:
        self._drain(block_until=0)

    def snapshot_state(self, checkpoint_id: int) -> OperatorSnapshot:
        rows = [(index, (copy_record(row), timestamp)) for index, (row, timestamp, _) in enumerate(self._queue)]
        if not rows:
            return OperatorSnapshot()
        return OperatorSnapshot(
            operator=[OperatorStateSnapshot(name=_IN_FLIGHT, kind=StateKind.OPERATOR, entries=rows)]
        )
