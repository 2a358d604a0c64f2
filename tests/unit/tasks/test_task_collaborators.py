"""A stream task is constructed whole, and the real network classes have every member its Protocols name."""

from __future__ import annotations

import time
from datetime import timedelta
from types import SimpleNamespace

import pytest

from flinklike_spark._runtime.network.input_gate import InputChannel, InputGate, LocalInputChannel
from flinklike_spark._runtime.network.remote_input_channel import RemoteInputChannel
from flinklike_spark._runtime.tasks.checkpoint_collaborators import CheckpointedGate, SubtaskCheckpointSettings
from flinklike_spark._runtime.tasks.mailbox import MailTimer
from flinklike_spark._runtime.tasks.stream_task import StreamTask
from flinklike_spark._runtime.tasks.subtask_checkpoint import SubtaskCheckpointCoordinator
from flinklike_spark._runtime.tasks.task_collaborators import TaskCheckpoints, TaskInputGate, TaskRestore
from flinklike_spark.errors import ConfigurationError


def _members(protocol: type) -> set[str]:
    return {name for name in vars(protocol) if not name.startswith("_")} | set(getattr(protocol, "__annotations__", {}))


@pytest.mark.parametrize("protocol", [TaskInputGate, CheckpointedGate])
def test_the_input_gate_has_every_member_the_task_and_its_coordinator_use(protocol):
    assert {name for name in _members(protocol) if not hasattr(InputGate, name)} == set()


def test_the_coordinator_has_every_member_its_task_uses():
    missing = {name for name in _members(TaskCheckpoints) if not hasattr(SubtaskCheckpointCoordinator, name)}
    assert missing <= {"final_checkpoint", "final_checkpoint_completed", "recording"}  # set in __init__


def test_the_input_channel_abc_declares_what_the_checkpoint_coordinator_calls_on_a_channel():
    assert {"convert_to_priority_event", "take_jumped_buffers"} <= InputChannel.__abstractmethods__
    for channel in (LocalInputChannel, RemoteInputChannel):
        assert not channel.__abstractmethods__, channel


class _Gate:
    num_channels = 2

    def set_data_listener(self, listener) -> None:
        self.listener = listener


def test_a_stream_task_builds_its_coordinator_from_its_own_timers_and_buffer_in_progress():
    built = {}

    def checkpoints(**collaborators):
        built.update(collaborators)
        return SimpleNamespace(final_checkpoint=False)

    chain = SimpleNamespace(network_outputs=[], operators=[], head=None)
    task = StreamTask(
        chain,
        [_Gate()],
        buffer_timeout=timedelta(milliseconds=100),
        restore=TaskRestore(finished=True),
        checkpoints=checkpoints,
    )
    assert task.checkpoints is not None and set(built) == {"register_timer", "unprocessed_input"}
    assert built["unprocessed_input"]() is None
    fired = []
    timer = built["register_timer"](timedelta(0), lambda: fired.append(True))
    assert isinstance(timer, MailTimer)
    deadline = time.monotonic() + 5
    while not len(task.mailbox) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fired == [] and task.mailbox.run_pending() == 1 and fired == [True]  # the callback ran as a mail


def test_a_stream_task_without_a_factory_has_no_coordinator():
    chain = SimpleNamespace(network_outputs=[], operators=[], head=None)
    assert StreamTask(chain, [], buffer_timeout=timedelta(milliseconds=100)).checkpoints is None


def test_checkpoint_settings_refuse_a_mode_that_is_not_a_barrier_handler_mode(tmp_path):
    with pytest.raises(ConfigurationError, match="mode must be one of"):
        SubtaskCheckpointSettings(
            task_name="t", job_id="j", execution_id="e", subtask_index=0, channel_state_uid="u",
            storage=str(tmp_path), mode="aligned",
        )  # fmt: skip
