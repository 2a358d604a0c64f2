"""Task: one subtask attempt inside a TaskExecutor, on its own thread.

Lifecycle (ExecutionState, enforced by its transition table):
DEPLOYING (created by submit_task) -> INITIALIZING (network set up, operators
created) -> RUNNING (the StreamTask's mailbox loop) -> FINISHED; or CANCELING
-> CANCELED on cancel; or FAILED on any error (also user exceptions, reported
with their traceback). Every state change after DEPLOYING is reported through
``report`` (the TaskExecutor forwards it to the JobMaster). The final report
is sent exactly once, after every resource (operators, gates) is released.

As in Flink's ``Task.doRun``, only a root cause ends a task FAILED: a task
that raises :class:`~flinklike_spark.errors.CancelTaskError` (e.g.
``ProducerFailedError``: its producer failed or was cancelled) ends CANCELED,
and so does any error raised while the task is being cancelled (closing its
gates interrupts its waits, which then raise). Cancelling closes the input
gates, so a task thread blocked waiting for a partition or a connection
wakes up at once instead of waiting for ``request-backoff.max``.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import threading
import traceback
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from flinklike_spark._runtime.checkpoint_messages import CheckpointResponder
from flinklike_spark._runtime.deployment import TaskDeploymentDescriptor, TaskExecutionState
from flinklike_spark._runtime.graph.execution_state import ExecutionState, transition_table
from flinklike_spark._runtime.network.events import CheckpointBarrier
from flinklike_spark._runtime.network.input_gate import InputGate, LocalInputChannel
from flinklike_spark._runtime.network.partition_manager import ResultPartitionManager
from flinklike_spark._runtime.network.partitioner import create_channel_selector
from flinklike_spark._runtime.network.remote_input_channel import RemoteInputChannel
from flinklike_spark._runtime.network.result_partition import ResultPartition
from flinklike_spark._runtime.operators.rows import RowsConverter
from flinklike_spark._runtime.operators.stream_operator import OperatorContext
from flinklike_spark._runtime.state.incremental_snapshot import IncrementalConfig
from flinklike_spark._runtime.state_machine import StateMachine
from flinklike_spark._runtime.taskexecutor.local_state import TaskLocalStateStore
from flinklike_spark._runtime.taskexecutor.restore import load_restored_state
from flinklike_spark._runtime.tasks.checkpoint_collaborators import SubtaskCheckpointSettings
from flinklike_spark._runtime.tasks.operator_chain import OperatorChain
from flinklike_spark._runtime.tasks.record_writer import RecordWriterOutput
from flinklike_spark._runtime.tasks.stream_task import StreamTask
from flinklike_spark._runtime.tasks.subtask_checkpoint import SubtaskCheckpointCoordinator
from flinklike_spark._runtime.tasks.task_collaborators import TaskRestore
from flinklike_spark.errors import (
    CancelTaskError,
    CorruptCheckpointError,
    IncompatibleCheckpointError,
    NonRecoverableError,
    NonRecoverableTaskError,
    RemoteTaskError,
    import_error_hint,
    is_non_recoverable,
)

if TYPE_CHECKING:  # pragma: no cover
    from flinklike_spark._runtime.watermark_alignment import WatermarkReport

__all__ = ["Task"]

log = logging.getLogger(__name__)


def describe_failure(exc: BaseException, task_name: str) -> RemoteTaskError:
    """Wrap any exception into a picklable RemoteTaskError carrying the traceback text."""
    if isinstance(exc, RemoteTaskError):
        return exc
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    # Only the task knows the original type: it decides whether the JobMaster may restart.
    error_type = NonRecoverableTaskError if is_non_recoverable(exc) else RemoteTaskError
    message = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, ImportError):
        message += f" ({import_error_hint(exc)})"
    return error_type(
        message,
        task_name=task_name,
        exception_type=f"{type(exc).__module__}.{type(exc).__qualname__}",
        remote_traceback=text,
    )


class Task:
    """Runs one TaskDeploymentDescriptor.

    Args:
        tdd: what to run.
        partition_manager: this TaskExecutor's partitions (local producers register here).
        secret: cluster secret for remote input channels.
        report: called with every TaskExecutionState change (from the task thread).
        checkpoint_responder: where the task's checkpoint acknowledgements and declines go (the JobMaster).
        checkpoint_io: pool running the asynchronous part of snapshots.
        result_channel: the job's client, for ``execute_and_collect``'s sink (a ClientResultChannel).
        report_watermark: the JobMaster's watermark alignment (``JobMasterGateway.report_watermark``).
    """

    def __init__(
        self,
        tdd: TaskDeploymentDescriptor,
        *,
        partition_manager: ResultPartitionManager,
        secret: bytes,
        report: Callable[[TaskExecutionState], None],
        checkpoint_responder: CheckpointResponder,
        checkpoint_io: concurrent.futures.Executor | None = None,
        result_channel: Any = None,
        report_watermark: Callable[[WatermarkReport], int] | None = None,
        local_state: TaskLocalStateStore | None = None,
    ) -> None:
        self.tdd = tdd
        #: task-local recovery: this subtask's local snapshot copies, or None (disabled)
        self._local_state = (
            None if local_state is None else local_state.for_subtask(tdd.job_id, tdd.vertex_id, tdd.subtask_index)
        )
        #: 1.0: this attempt restored its keyed state from a local copy, 0.0: from Delta; unset: no restore
        self._restored_from_local: float | None = None
        self.execution_id = tdd.execution_id
        self.job_id = tdd.job_id
        self.allocation_id = tdd.allocation_id
        self.name = tdd.display_name
        self._partition_manager = partition_manager
        self._secret = secret
        self._report = report
        self._checkpoint_responder = checkpoint_responder
        self._checkpoint_io = checkpoint_io
        self._result_channel = result_channel
        self._report_watermark = report_watermark
        self._state = StateMachine(f"task {self.name}", ExecutionState.DEPLOYING, transition_table())
        self._lock = threading.Lock()
        self._stream_task: StreamTask | None = None
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"task {self.name}", daemon=True)
        self.terminated = threading.Event()

    @property
    def state(self) -> ExecutionState:
        return self._state.state

    def metrics(self) -> dict[str, float]:
        stream_task = self._stream_task
        if stream_task is None:
            return {}
        values = stream_task.metrics.snapshot()
        if self._restored_from_local is not None:
            values["restoredFromLocal"] = self._restored_from_local
        return values

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # -- control (any thread) ---------------------------------------------------------------

    def cancel(self) -> None:
        """Cancel: stop processing and interrupt every wait; the final state becomes CANCELED (unless already final)."""
        with self._lock:
            stream_task = self._stream_task if self._state.try_transition(ExecutionState.CANCELING) else None
        if stream_task is not None:
            stream_task.cancel()  # outside the lock: closing remote channels joins their receiver threads

    def trigger_checkpoint(self, barrier: CheckpointBarrier) -> bool:
        """Source tasks: take checkpoint ``barrier`` (a mail; declined if not running)."""
        stream_task = self._stream_task
        if stream_task is None or stream_task.checkpoints is None or self.state is not ExecutionState.RUNNING:
            return False
        stream_task.mailbox.put("trigger checkpoint", lambda: stream_task.trigger_checkpoint(barrier))
        return True

    def notify_checkpoint(self, checkpoint_id: int, *, completed: bool) -> None:
        """The JobMaster completed (or aborted) ``checkpoint_id``: tell the operators (a mail)."""
        stream_task = self._stream_task
        checkpoints = stream_task.checkpoints if stream_task is not None else None
        if checkpoints is None:
            return
        if completed:
            stream_task.mailbox.put(
                "checkpoint complete", lambda: checkpoints.notify_checkpoint_complete(checkpoint_id)
            )
        else:
            stream_task.mailbox.put("checkpoint aborted", lambda: checkpoints.notify_checkpoint_aborted(checkpoint_id))

    def fail_externally(self, cause: BaseException) -> None:
        """Fail from outside (slot freed, TaskExecutor shutting down): final state FAILED."""
        with self._lock:
            if self._state.is_terminal():
                return
            self._failure = cause
            stream_task = self._stream_task
        if stream_task is not None:
            stream_task.cancel()

    # -- task thread ------------------------------------------------------------------------

    def _transition(self, target: ExecutionState) -> bool:
        with self._lock:
            if self._failure is not None or self._state.state is ExecutionState.CANCELING:
                return False
            self._state.transition(target)
        self._send(target)
        return True

    def _send(self, state: ExecutionState, **extra) -> None:
        try:
            self._report(TaskExecutionState(job_id=self.job_id, execution_id=self.execution_id, state=state, **extra))
        except Exception:  # noqa: BLE001 - the JobMaster may be gone; heartbeat loss handles that
            log.exception("task %s could not report state %s", self.name, state.name)

    def _run(self) -> None:
        gates: list[InputGate] = []
        chain: OperatorChain | None = None
        error: BaseException | None = None
        try:
            if not self._transition(ExecutionState.INITIALIZING):
                return
            stream_task, chain, gates = self._build()
            with self._lock:
                self._stream_task = stream_task  # a cancel() from now on cancels it itself
            if not self._transition(ExecutionState.RUNNING):  # cancelled or failed externally meanwhile
                stream_task.cancel()
            stream_task.run()
        except BaseException as exc:  # noqa: BLE001 - every failure becomes the task's FAILED state
            error = exc
        finally:
            if self._stream_task is not None and self._stream_task.checkpoints is not None:
                self._stream_task.checkpoints.close()
            if chain is not None:
                close_error = chain.close()
                error = error or close_error
            for gate in gates:
                try:
                    gate.close()
                except Exception:  # noqa: BLE001
                    log.debug("error closing gate of %s", self.name, exc_info=True)
            self._finish(error, chain)

    def _finish(self, error: BaseException | None, chain: OperatorChain | None) -> None:
        with self._lock:
            failure = self._failure
            current = self._state.state
            if failure is not None:
                final = ExecutionState.FAILED
            elif current is ExecutionState.CANCELING or isinstance(error, CancelTaskError):
                # An error while cancelling is a consequence of the cancellation (closed gates);
                # a CancelTaskError says the failure that matters is another task's.
                final = ExecutionState.CANCELED
            elif error is not None:
                final = ExecutionState.FAILED
            else:
                final = ExecutionState.FINISHED
            if final is not ExecutionState.FINISHED:
                cause = failure or error
                # Every partition of the deployment, also those never built or registered:
                # a consumer waiting for one of them learns at once that it will not come.
                for deployment in self.tdd.result_partitions:
                    self._partition_manager.release(deployment.partition_id, cause)
            self._state.transition(final)
        extra = {}
        if final is ExecutionState.FAILED:
            cause = failure if failure is not None else error
            extra["error"] = describe_failure(cause, self.name)
            log.warning("task %s failed: %s", self.name, cause)
        elif final is ExecutionState.CANCELED and error is not None:
            log.info("task %s canceled: %s", self.name, error)
        if final is ExecutionState.FINISHED and chain is not None:
            extra["accumulators"] = chain.accumulators()
            extra["committables"] = chain.final_committables()
        self.terminated.set()
        self._send(final, **extra)

    def _local_copy(self, tdd: TaskDeploymentDescriptor):
        """Keyed entries from this TaskExecutor's copy of the checkpoint being restored, or None.

        Only at an unchanged parallelism (the copy holds exactly this subtask's key groups)."""
        restore = tdd.restore
        if self._local_state is None or restore.parallelism.get(tdd.vertex_id) != tdd.parallelism:
            return None
        return self._local_state.load(restore.checkpoint_id)

    def _build(self) -> tuple[StreamTask, OperatorChain, list[InputGate]]:
        tdd = self.tdd
        config = tdd.config
        network = config.network
        final_checkpoint = tdd.checkpointing is not None and tdd.checkpointing.final_checkpoint
        # FLIP-147: a vertex that had finished in the restored checkpoint runs no operator again.
        finished_on_restore = tdd.restore is not None and tdd.vertex_id in tdd.restore.finished_vertices
        context = OperatorContext(
            task_name=tdd.task_name,
            subtask_index=tdd.subtask_index,
            parallelism=tdd.parallelism,
            max_parallelism=tdd.max_parallelism,
            attempt_number=tdd.attempt_number,
            job_id=tdd.job_id,
            lineage_id=tdd.lineage_id or tdd.job_id,
            state_backend_type=config.get("state.backend.type"),
            batch_execution=config.get("execution.runtime-mode") == "batch",
            incremental=IncrementalConfig.from_configuration(config),
            rocksdb=config.rocksdb,
            result_channel=self._result_channel,
            report_watermark=self._report_watermark,
            vertex_id=str(tdd.vertex_id),
            final_checkpoint=final_checkpoint,
            cancelled=lambda: self._state.state in (ExecutionState.CANCELING, ExecutionState.CANCELED),
        )
        specs = list(tdd.operators)
        if tdd.splits:
            specs[0].splits = list(tdd.splits)
        feeding = {}
        for spec in specs:
            for edge_index in spec.network_outputs:
                feeding[edge_index] = spec
        partitions, outputs = [], []
        for index, deployment in enumerate(tdd.result_partitions):
            partition = ResultPartition(
                deployment.partition_id,
                deployment.num_subpartitions,
                buffers_per_subpartition=network.max_buffers_per_channel,
            )
            producer = feeding[index]
            schema = producer.network_output_schema(index)
            converter = RowsConverter(schema, stream_name=producer.name)
            selector = create_channel_selector(
                deployment.partitioner,
                deployment.num_subpartitions,
                subtask_index=tdd.subtask_index,
                producer=f"operator {producer.name!r} (uid {producer.uid!r})",
            )
            outputs.append(RecordWriterOutput(partition, selector, converter, segment_size=network.segment_size))
            partitions.append(partition)
        gates = []
        timeout = network.partition_request_timeout.total_seconds()
        for gate_index, gate_deployment in enumerate(tdd.input_gates):
            channels = []
            for channel_index, channel in enumerate(gate_deployment.channels):
                if channel.local:
                    channels.append(
                        LocalInputChannel(
                            channel_index,
                            self._partition_manager,
                            channel.partition_id,
                            channel.subpartition,
                            partition_wait_timeout=timeout,
                        )
                    )
                else:
                    channels.append(
                        RemoteInputChannel(
                            channel_index,
                            channel.address,
                            self._secret,
                            channel.partition_id,
                            channel.subpartition,
                            initial_credit=network.buffers_per_channel + network.floating_buffers_per_gate,
                            partition_wait_timeout=timeout,
                        )
                    )
            gates.append(InputGate(gate_index, channels))
        chain = OperatorChain(specs, outputs, context)
        # Register partitions only once the chain exists: consumers may connect right away.
        for partition in partitions:
            self._partition_manager.register(partition)
        timing = {
            "buffer_timeout": config.pipeline.buffer_timeout,
            "source_batch_rows": max(1, network.segment_size // 8),
        }
        if finished_on_restore:
            log.info("task %s is deployed finished: its vertex had finished in checkpoint %d", self.name,
                     tdd.restore.checkpoint_id)  # fmt: skip
            # no state, no checkpoints: it ends once its inputs ended
            return StreamTask(chain, gates, restore=TaskRestore(finished=True), **timing), chain, gates
        restore = None if tdd.restore is None else self._restore(tdd)
        checkpoints = None
        if tdd.checkpointing is not None:
            settings = SubtaskCheckpointSettings(
                task_name=self.name,
                job_id=tdd.job_id,
                execution_id=tdd.execution_id,
                subtask_index=tdd.subtask_index,
                channel_state_uid=tdd.vertex_id,
                storage=tdd.checkpointing.storage,
                mode=tdd.checkpointing.mode,
                channel_state_timeout=timedelta(seconds=tdd.checkpointing.timeout),
                at_least_once=tdd.checkpointing.at_least_once,
                final_checkpoint=final_checkpoint,
            )
            checkpoints = functools.partial(
                SubtaskCheckpointCoordinator,
                settings,
                chain=chain,
                gates=gates,
                responder=self._checkpoint_responder,
                executor=self._checkpoint_io,
                local_state=self._local_state,
            )
        return StreamTask(chain, gates, restore=restore, checkpoints=checkpoints, **timing), chain, gates

    def _restore(self, tdd: TaskDeploymentDescriptor) -> TaskRestore:
        """The state and in-flight data ``tdd`` restores (from the local copy when there is one)."""
        try:
            local = self._local_copy(tdd)
            self._restored_from_local = 0.0 if local is None else 1.0
            state, replay_input = load_restored_state(tdd, local)
        except (IncompatibleCheckpointError, CorruptCheckpointError) as exc:
            # A checkpoint that cannot be restored stays so: restarting would fail the same way.
            raise NonRecoverableError(
                f"task {self.name} cannot restore checkpoint {tdd.restore.checkpoint_id} of job "
                f"{tdd.restore.job_id}: {exc}"
            ) from exc
        return TaskRestore(state=state, input=replay_input)
