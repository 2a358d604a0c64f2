"""ResourceManager slot requests: waiting for slots, slot.request.timeout, capacity, withdrawal."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import pytest

from flinklike_spark import Configuration
from flinklike_spark._runtime.jobmaster.main_thread import ManualMainThreadExecutor
from flinklike_spark._runtime.jobmaster.resource_manager import ResourceManager
from flinklike_spark.errors import NoResourceAvailableError, is_non_recoverable


@pytest.fixture
def rm_and_clock():
    main = ManualMainThreadExecutor()
    rm = ResourceManager(
        Configuration({"local.number-taskmanager": 1, "slot.request.timeout": "30 s"}), b"secret", main
    )
    yield rm, main
    rm.close()
    main.shutdown()


def test_a_request_without_free_slot_waits_and_fails_after_slot_request_timeout(rm_and_clock):
    rm, main = rm_and_clock
    future = rm.allocate("job", 0, "job/slot-0")
    main.advance(timedelta(seconds=29))
    assert not future.done(), "a request waits for a (replacement) TaskExecutor"
    main.advance(timedelta(seconds=1))
    error = future.exception(0)
    assert isinstance(error, NoResourceAvailableError) and is_non_recoverable(error)
    assert "slot.request.timeout (0:00:30)" in str(error)


def test_a_request_beyond_the_cluster_size_fails_at_once(rm_and_clock):
    rm, _ = rm_and_clock
    waiting = rm.allocate("job", 0, "job/slot-0")
    beyond = rm.allocate("job", 1, "job/slot-1")
    assert "no free slot left; the cluster has 1 slots" in str(beyond.exception(0))
    assert not waiting.done()


def test_a_withdrawn_request_frees_its_place(rm_and_clock):
    rm, main = rm_and_clock
    assert rm.allocate("job", 0, "job/slot-0").cancel()
    again = rm.allocate("job", 0, "job/slot-0b")
    assert not again.done()
    main.advance(timedelta(seconds=31))
    assert isinstance(again.exception(0), NoResourceAvailableError)


def test_spare_task_executors_count_towards_the_cluster_size():
    """slotmanager.redundant-taskmanager-num: the spares' slots are ordinary slots of the cluster, so a request
    for them waits for their registration instead of failing as beyond the cluster's size."""
    main = ManualMainThreadExecutor()
    config = Configuration({"local.number-taskmanager": 1, "slotmanager.redundant-taskmanager-num": 1})
    rm = ResourceManager(config, b"secret", main)
    try:
        first, second = rm.allocate("job", 0, "job/slot-0"), rm.allocate("job", 1, "job/slot-1")
        assert not first.done() and not second.done()
        beyond = rm.allocate("job", 2, "job/slot-2")
        assert "no free slot left; the cluster has 2 slots" in str(beyond.exception(0))
    finally:
        rm.close()
        main.shutdown()


def test_the_slots_of_task_executors_started_for_a_rescale_are_handed_out_last():
    """After a rescale down, the lowest subtask indexes take the cluster's own TaskExecutors' slots, so that the
    TaskExecutors started for the rescale fall idle and can be stopped."""
    main = ManualMainThreadExecutor()
    rm = ResourceManager(Configuration({"local.number-taskmanager": 2}), b"s" * 32, main)
    for resource_id in ("tm-a", "tm-b", "tm-c"):
        rm.register(SimpleNamespace(resource_id=resource_id, address="grpc+tcp://127.0.0.1:1", num_slots=2, pid=1))
    rm.mark_on_demand(["tm-a"])
    with rm._lock:
        order = rm.physical_slots_locked()
    assert order == [("tm-b", 0), ("tm-c", 0), ("tm-b", 1), ("tm-c", 1), ("tm-a", 0), ("tm-a", 1)]
    assert rm.total_slots() == 6 and rm.slots_for_job("job") == 6
    rm.close()
    main.shutdown()
