"""Control RPC over Arrow Flight: round trips, error propagation, authentication, failures."""

from __future__ import annotations

import pathlib
import pickle
import threading
import time
from dataclasses import dataclass
from typing import Any

import pyarrow.flight as flight
import pytest

from flinklike_spark._runtime.network.ports import free_port
from flinklike_spark._runtime.rpc import FlightNode, RpcClient, auth_token, call_options, generate_secret, rpc_name
from flinklike_spark.errors import (
    BrokenChannelError,
    ClosedChannelError,
    RemoteTaskError,
    RpcAuthenticationError,
    RpcTimeoutError,
)

pytestmark = pytest.mark.timeout(30)


@dataclass(frozen=True)
class Echo:
    value: Any = None


@dataclass(frozen=True)
class Add:
    a: int
    b: int


@dataclass(frozen=True)
class MakeFn:
    k: int


@dataclass(frozen=True)
class Fail:
    value: Any = None


@dataclass(frozen=True)
class Known:
    pass


@dataclass(frozen=True)
class Nope:
    pass


@dataclass(frozen=True)
class Run:
    value: Any = None


class OwnError(Exception):
    """An exception type the caller can unpickle: it comes back as itself."""


class NotRebuildableError(Exception):
    """Pickles, but cannot be rebuilt from its args (two required arguments)."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(f"code {code}: {detail}")


class UnpicklableError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


class TouchOnUnpickle:
    """A pickle payload that creates a file when (and only when) it is unpickled."""

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path

    def __reduce__(self):
        return (pathlib.Path.touch, (self.path,))


@pytest.fixture
def secret() -> bytes:
    return generate_secret()


@pytest.fixture
def node(secret):
    node = FlightNode(secret)
    node.start()
    yield node
    node.shutdown()


@pytest.fixture
def client(node, secret):
    client = RpcClient(node.address, secret)
    yield client
    client.close()


def test_round_trip_of_payloads_and_results(node, client):
    node.register_handler(Echo, lambda message: message.value)
    node.register_handler(Add, lambda message: message.a + message.b)
    node.register_handler(MakeFn, lambda message: lambda x: x * message.k)  # closures travel with cloudpickle

    assert client.call(Echo()) is None
    assert client.call(Echo({"a": [1, 2.5, "x"], "b": (None, b"\x00")})) == {"a": [1, 2.5, "x"], "b": (None, b"\x00")}
    assert client.call(Add(2, 3)) == 5
    assert client.call(MakeFn(3))(4) == 12
    assert node.address.startswith("grpc+tcp://127.0.0.1:")
    assert node.handler_names() == ["Add", "Echo", "MakeFn"]


def test_a_message_of_another_type_under_a_registered_name_is_refused(node, secret):
    calls = []
    node.register_handler(Echo, calls.append)
    raw = flight.FlightClient(node.address)
    try:
        [result] = raw.do_action(
            flight.Action(rpc_name(Echo), pickle.dumps(Add(1, 2))), call_options(auth_token(secret))
        )
    finally:
        raw.close()
    assert result.body.to_pybytes()[:1] == b"\x01"  # an error answer
    assert calls == []


def test_register_handler_takes_a_message_type(node):
    with pytest.raises(TypeError, match="message type"):
        node.register_handler("echo", lambda message: message)


def test_handler_exception_of_a_known_type_is_reraised_as_itself(node, client):
    def fail(message):
        raise OwnError(f"bad payload {message.value!r}")

    node.register_handler(Fail, fail)
    with pytest.raises(OwnError, match="bad payload 7") as info:
        client.call(Fail(7))
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "remote traceback" in notes and "in fail" in notes


@pytest.mark.parametrize("error_type", [NotRebuildableError, UnpicklableError])
def test_handler_exception_that_cannot_travel_becomes_remote_task_error(node, client, error_type):
    def fail(_):
        raise error_type(42, "disk on fire") if error_type is NotRebuildableError else error_type("disk on fire")

    node.register_handler(Fail, fail)
    with pytest.raises(RemoteTaskError) as info:
        client.call(Fail())
    error = info.value
    assert error.exception_type.endswith(error_type.__qualname__)
    assert "disk on fire" in str(error)
    assert "Traceback" in error.remote_traceback and "in fail" in error.remote_traceback
    assert pickle.loads(pickle.dumps(error)).remote_traceback == error.remote_traceback


def test_unknown_handler_names_the_registered_ones(node, client):
    node.register_handler(Known, lambda _: 1)
    with pytest.raises(LookupError, match=r"'Nope'.*\['Known'\]"):
        client.call(Nope())


def test_wrong_or_missing_secret_is_rejected_before_anything_is_unpickled(node, secret, tmp_path):
    marker = tmp_path / "unpickled"
    calls = []
    node.register_handler(Run, calls.append)
    evil = pickle.dumps(Run(TouchOnUnpickle(marker)))

    wrong = RpcClient(node.address, generate_secret())
    try:
        with pytest.raises(RpcAuthenticationError):
            wrong.call(Run(TouchOnUnpickle(marker)))
    finally:
        wrong.close()
    # No authorization header at all, raw Flight client.
    raw = flight.FlightClient(node.address)
    try:
        with pytest.raises(flight.FlightUnauthenticatedError):
            list(raw.do_action(flight.Action(rpc_name(Run), evil)))
        with pytest.raises(flight.FlightUnauthenticatedError):
            list(raw.list_actions())
    finally:
        raw.close()
    assert not marker.exists()
    assert calls == []

    # Control: with the right secret the same payload is unpickled (and runs).
    raw = flight.FlightClient(node.address)
    try:
        list(raw.do_action(flight.Action(rpc_name(Run), evil), call_options(auth_token(secret))))
    finally:
        raw.close()
    assert marker.exists()


def test_unreachable_address_fails_quickly(secret):
    client = RpcClient(f"grpc+tcp://127.0.0.1:{free_port()}", secret, connect_timeout=2.0)
    try:
        started = time.monotonic()
        with pytest.raises(BrokenChannelError, match="unreachable"):
            client.call(Echo(), timeout=10.0)
        assert time.monotonic() - started < 3.0
    finally:
        client.close()


def test_peer_that_shut_down_is_a_broken_channel(secret):
    node = FlightNode(secret)
    node.register_handler(Echo, lambda _: "pong")
    node.start()
    client = RpcClient(node.address, secret)
    try:
        assert client.call(Echo()) == "pong"
        node.shutdown()
        node.shutdown()  # idempotent
        with pytest.raises(BrokenChannelError):
            client.call(Echo(), timeout=5.0)
    finally:
        client.close()


def test_call_timeout_raises_rpc_timeout_error(node, client):
    node.register_handler(Echo, lambda message: time.sleep(message.value))
    with pytest.raises(RpcTimeoutError) as info:
        client.call(Echo(1.0), timeout=0.2)
    assert isinstance(info.value, BrokenChannelError) and isinstance(info.value, TimeoutError)


def test_closed_client_raises_closed_channel_error(node, client):
    node.register_handler(Echo, lambda _: "pong")
    client.close()
    client.close()
    with pytest.raises(ClosedChannelError):
        client.call(Echo())


def test_close_while_calls_are_in_flight_lets_them_finish_and_refuses_new_ones(node, client):
    # The contract of the deferred close. (The crash it prevents, a segfault in CI when a TaskExecutor's
    # shutdown-then-close raced its release_job, did not reproduce here in 30 tries with a node shutting
    # down under four calls; this test checks the order of things, not the crash.)
    started = threading.Barrier(5)
    node.register_handler(Echo, lambda message: (time.sleep(0.3), message.value)[1])
    results, errors = [], []

    def call(value: int) -> None:
        started.wait(5)
        try:
            results.append(client.call(Echo(value), timeout=10))
        except BaseException as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    started.wait(5)
    time.sleep(0.1)  # the four calls are inside the Flight client
    client.close()
    with pytest.raises(ClosedChannelError):
        client.call(Echo(9))
    for thread in threads:
        thread.join(10)
    assert errors == [] and sorted(results) == [0, 1, 2, 3]


def test_one_client_shared_by_ten_threads(node, client):
    node.register_handler(Echo, lambda message: (threading.current_thread().name, message.value**2))
    results: dict[int, list[int]] = {}
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            results[t] = [client.call(Echo(t * 1000 + i))[1] for i in range(50)]
        except BaseException as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert errors == []
    assert results == {t: [(t * 1000 + i) ** 2 for i in range(50)] for t in range(10)}


def test_node_lifecycle_errors(secret):
    node = FlightNode(secret)
    with pytest.raises(RuntimeError, match="after start"):
        _ = node.address
    node.shutdown()  # before start: fine
    with pytest.raises(ClosedChannelError):
        node.start()
    with pytest.raises(ValueError, match="at least 16 bytes"):
        FlightNode(b"short")
