"""Authenticated control RPC and the data server of one process, over Arrow Flight.

Every process of a cluster (the JobMaster's driver and each TaskExecutor)
runs exactly one :class:`FlightNode`: a ``pyarrow.flight`` server that serves

* control RPC as Flight *actions*: every RPC is one message object (the
  frozen dataclasses of :mod:`flinklike_spark._runtime.gateways`); the action
  type is the message's type name, for which a handler was registered with
  :meth:`FlightNode.register_handler`, the body is the cloudpickled message,
  the single result is the cloudpickled outcome; and
* data streams as Flight ``DoExchange`` calls, when the node was given a
  ``data_server`` (a
  :class:`~flinklike_spark._runtime.network.partition_server.PartitionRequestServer`;
  the node does not import the data plane).

:class:`RpcClient` is the matching client.

Authentication: every call carries an ``authorization`` header derived from
the per-cluster secret (:func:`generate_secret`). A server middleware checks it
with :func:`hmac.compare_digest` when the call starts, before any handler runs
and before a single byte of the payload is read, let alone unpickled; a
missing or wrong token fails the call with ``FlightUnauthenticatedError``,
which the client raises as :class:`~flinklike_spark.errors.RpcAuthenticationError`.
The token is an HMAC of the secret, so the secret itself never crosses the
wire; it is still a bearer credential, and the transport is not encrypted
(plain ``grpc+tcp``): the cluster network must be trusted against sniffing.
The client trusts the server it was pointed at (it unpickles its answers).

Payloads and answers are unpickled with :func:`~flinklike_spark._runtime.serialization.loads`,
one thread at a time per process, so concurrent calls cannot deadlock on module import locks.

Thread rules: handlers run on Flight's server threads, possibly many at once;
they must be quick and thread-safe (the JobMaster's handlers only post work
to its main-thread executor). :class:`RpcClient` may be shared by threads.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import socket
import threading
import traceback
from collections.abc import Callable
from typing import Any, Protocol

import cloudpickle
import pyarrow as pa
import pyarrow.flight as flight

from flinklike_spark._runtime import serialization
from flinklike_spark.errors import (
    BrokenChannelError,
    ClosedChannelError,
    NetworkError,
    RemoteTaskError,
    RpcAuthenticationError,
    RpcTimeoutError,
)

__all__ = [
    "DataServer",
    "FlightNode",
    "Handler",
    "RpcClient",
    "auth_token",
    "call_options",
    "connect_options",
    "generate_secret",
    "rpc_name",
    "translate_flight_error",
]

_log = logging.getLogger(__name__)

Handler = Callable[[Any], Any]
"""An RPC handler: takes the unpickled message, returns a picklable result."""


def rpc_name(message_type: type) -> str:
    """The action type that carries messages of ``message_type`` (its qualified name)."""
    return message_type.__qualname__


AUTH_HEADER = "authorization"
_TOKEN_CONTEXT = b"flinklike-spark/flight-auth/v1"
_SECRET_MIN_BYTES = 16

# First byte of an action result.
_OK = b"\x00"
_ERROR = b"\x01"


def generate_secret() -> bytes:
    """Return a fresh random per-cluster secret (32 bytes from :mod:`secrets`)."""
    return secrets.token_bytes(32)


def _check_secret(secret: bytes) -> bytes:
    if not isinstance(secret, bytes | bytearray) or len(secret) < _SECRET_MIN_BYTES:
        raise ValueError(
            f"the cluster secret must be at least {_SECRET_MIN_BYTES} bytes (see generate_secret()), "
            f"got {type(secret).__name__} of length {len(secret) if hasattr(secret, '__len__') else '?'}"
        )
    return bytes(secret)


def auth_token(secret: bytes) -> str:
    """The ``authorization`` header value for ``secret`` (``"Bearer <hex hmac>"``)."""
    digest = hmac.new(_check_secret(secret), _TOKEN_CONTEXT, hashlib.sha256).hexdigest()
    return f"Bearer {digest}"


def call_options(secret_token: str, timeout: float | None = None) -> flight.FlightCallOptions:
    """Flight call options carrying the auth header and an optional deadline in seconds."""
    return flight.FlightCallOptions(headers=[(AUTH_HEADER.encode(), secret_token.encode())], timeout=timeout)


def translate_flight_error(error: BaseException, address: str, what: str) -> NetworkError:
    """Map a ``pyarrow.flight`` error of a call to ``address`` to this library's errors.

    Unauthenticated/unauthorized -> :class:`RpcAuthenticationError`; deadline
    exceeded -> :class:`RpcTimeoutError`; everything else (unavailable,
    cancelled, internal, plain ``OSError``) -> :class:`BrokenChannelError`.
    The caller raises the result ``from error``.
    """
    if isinstance(error, flight.FlightUnauthenticatedError | flight.FlightUnauthorizedError):
        return RpcAuthenticationError(
            f"{what} to {address} was rejected: missing or wrong cluster secret ({_first_line(error)})"
        )
    if isinstance(error, flight.FlightTimedOutError):
        return RpcTimeoutError(f"{what} to {address} timed out: {_first_line(error)}")
    return BrokenChannelError(f"{what} to {address} failed, the peer is unreachable or died: {_first_line(error)}")


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


class _AuthMiddlewareFactory(flight.ServerMiddlewareFactory):
    """Rejects every call whose ``authorization`` header is not the cluster token."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self._token = token.encode()

    def start_call(self, info, headers):
        values = headers.get(AUTH_HEADER) or []
        presented = values[0] if len(values) == 1 else ""
        if isinstance(presented, str):
            presented = presented.encode("utf-8", "replace")
        # Compare even when absent, so timing does not reveal which case it was.
        if not hmac.compare_digest(presented, self._token) or len(values) != 1:
            raise flight.FlightUnauthenticatedError("missing or wrong cluster secret")
        return None


class _FlightService(flight.FlightServerBase):
    """The Flight server; delegates to its :class:`FlightNode`."""

    def __init__(self, node: FlightNode, location: str, token: str) -> None:
        super().__init__(location, middleware={"auth": _AuthMiddlewareFactory(token)})
        self._node = node

    def do_action(self, context, action):
        return self._node._dispatch(action.type, action.body)

    def list_actions(self, context):
        return [(name, "flinklike RPC handler") for name in self._node.handler_names()]

    def do_exchange(self, context, descriptor, reader, writer):
        server = self._node._data_server
        if server is None:
            raise flight.FlightServerError("this node serves no result partitions (no data_server)")
        server.serve(context, descriptor, reader, writer)


class DataServer(Protocol):
    """What a :class:`FlightNode` hands ``DoExchange`` calls to (after authentication)."""

    def serve(self, context, descriptor: flight.FlightDescriptor, reader, writer) -> None: ...

    def close(self) -> None: ...


class FlightNode:
    """The one Flight server of a process: control RPC handlers plus the data server.

    Args:
        secret: the per-cluster secret (at least 16 bytes, see :func:`generate_secret`).
        data_server: if given, it serves ``DoExchange`` calls: consumers in
            other processes read this process's result partitions through it.
        host: interface to bind. ``"0.0.0.0"``/``"::"`` bind every interface and
            advertise this host's name in :attr:`address`.
        port: TCP port; 0 picks a free one.

    Lifecycle: construct, :meth:`register_handler` (before or after start),
    :meth:`start` once, :meth:`shutdown` (idempotent). Shutdown first ends the
    open data streams (their consumers see a broken channel), then waits for
    running calls to return.

    Thread rules: all methods are thread-safe. Handlers run on Flight's
    threads concurrently and must return quickly.
    """

    def __init__(
        self,
        secret: bytes,
        *,
        data_server: DataServer | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self._token = auth_token(secret)
        self._host = host
        self._port = port
        self._lock = threading.Lock()
        self._handlers: dict[str, tuple[type, Handler]] = {}
        self._server: _FlightService | None = None
        self._shut_down = False
        self._data_server = data_server

    def __repr__(self) -> str:
        state = "shut down" if self._shut_down else ("serving" if self._server is not None else "created")
        where = f" at {self.address}" if self._server is not None else ""
        return f"FlightNode({state}{where})"

    def register_handler(self, message_type: type, fn: Handler) -> None:
        """Serve messages of ``message_type`` with ``fn(message) -> result``; replaces an earlier handler.

        An exception raised by ``fn`` is re-raised in the caller (see
        :meth:`RpcClient.call`).
        """
        if not isinstance(message_type, type):
            raise TypeError(f"register_handler expects a message type (a class), got {message_type!r}")
        with self._lock:
            self._handlers[rpc_name(message_type)] = (message_type, fn)

    def handler_names(self) -> list[str]:
        """Names of the message types that have handlers, sorted."""
        with self._lock:
            return sorted(self._handlers)

    def start(self) -> None:
        """Bind and start serving (Flight serves on its own threads); returns at once.

        Raises:
            ClosedChannelError: the node was shut down.
            NetworkError: the port could not be bound.
        """
        with self._lock:
            if self._shut_down:
                raise ClosedChannelError(f"{self!r} was shut down and cannot be restarted")
            if self._server is not None:
                raise RuntimeError(f"{self!r} was already started")
            bind = self._host if ":" not in self._host else f"[{self._host}]"
            try:
                self._server = _FlightService(self, f"grpc+tcp://{bind}:{self._port}", self._token)
            except (flight.FlightError, OSError, pa.ArrowException) as e:
                raise NetworkError(f"could not start the Flight server on {self._host}:{self._port}: {e}") from e
            _log.debug("FlightNode serving at %s", self.address)

    @property
    def address(self) -> str:
        """The URI peers connect to, ``"grpc+tcp://HOST:PORT"``.

        Raises:
            RuntimeError: :meth:`start` was not called.
        """
        server = self._server
        if server is None:
            raise RuntimeError("FlightNode.address is known only after start()")
        host = self._host
        if host in ("0.0.0.0", "::", ""):
            host = socket.getfqdn()
        elif ":" in host:
            host = f"[{host}]"
        return f"grpc+tcp://{host}:{server.port}"

    @property
    def port(self) -> int:
        """The bound TCP port (after :meth:`start`)."""
        server = self._server
        if server is None:
            raise RuntimeError("FlightNode.port is known only after start()")
        return server.port

    def shutdown(self) -> None:
        """Stop serving; idempotent, safe before :meth:`start`.

        Open data streams end without ``EndOfPartition`` (consumers raise
        :class:`BrokenChannelError`); running RPC handlers are waited for.
        """
        with self._lock:
            if self._shut_down:
                return
            self._shut_down = True
            server = self._server
        if self._data_server is not None:
            self._data_server.close()
        if server is not None:
            server.shutdown()
            _log.debug("FlightNode at port %s shut down", server.port)

    # -- dispatch (Flight threads) ---------------------------------------------------

    def _dispatch(self, name: str, body: pa.Buffer | None) -> list[flight.Result]:
        # Runs only after _AuthMiddlewareFactory accepted the call.
        with self._lock:
            entry = self._handlers.get(name)
            known = sorted(self._handlers)
        try:
            if entry is None:
                raise LookupError(f"no RPC handler for {name!r}; registered: {known}")
            message_type, handler = entry
            message = serialization.loads(body) if body is not None and body.size else None
            if not isinstance(message, message_type):
                raise TypeError(f"RPC {name!r} carried a {type(message).__name__}, not a {message_type.__name__}")
            result = handler(message)
            answer = _OK + cloudpickle.dumps(result)
        except Exception as e:  # noqa: BLE001 - every handler failure goes back to the caller
            answer = _ERROR + _encode_exception(e)
        return [flight.Result(pa.py_buffer(answer))]


def _encode_exception(error: BaseException) -> bytes:
    formatted = "".join(traceback.format_exception(error))
    try:
        pickled: bytes | None = cloudpickle.dumps(error)
    except Exception:  # noqa: BLE001 - unpicklable: travels as type name and text only
        pickled = None
    return cloudpickle.dumps(
        {
            "pickled": pickled,
            "type": f"{type(error).__module__}.{type(error).__qualname__}",
            "message": str(error),
            "traceback": formatted,
        }
    )


def _decode_exception(data: bytes, name: str, address: str) -> BaseException:
    info = serialization.loads(data)
    remote_tb = info["traceback"]
    if info["pickled"] is not None:
        try:
            error = serialization.loads(info["pickled"])
        except Exception:  # noqa: BLE001 - not rebuildable here: fall back to RemoteTaskError
            error = None
        if isinstance(error, BaseException):
            error.add_note(f"Raised by RPC handler {name!r} at {address}; remote traceback:\n{remote_tb}")
            return error
    return RemoteTaskError(
        f"RPC {name!r} at {address} failed: {info['type']}: {info['message']}",
        task_name=f"rpc:{name}",
        exception_type=info["type"],
        remote_traceback=remote_tb,
    )


class RpcClient:
    """Calls handlers of one remote :class:`FlightNode`.

    Args:
        address: the node's :attr:`FlightNode.address`.
        secret: the per-cluster secret.
        connect_timeout: bound, in seconds, of one attempt to establish the TCP
            connection (a refused connection fails at once; a silent host
            fails after this long).

    Thread rules: one client may be shared by any number of threads; calls
    run concurrently over one connection. :meth:`close` is idempotent and
    does not wait; calls after it raise :class:`ClosedChannelError`, and
    calls in flight finish (or time out) first: the Flight client is closed
    when the last of them returns, since closing it under a call in flight
    crashes the process (a TaskExecutor's ``release_job`` on an I/O thread
    and its ``shutdown`` then ``close`` on the caller's did, in CI).
    """

    def __init__(self, address: str, secret: bytes, *, connect_timeout: float = 10.0) -> None:
        if connect_timeout <= 0:
            raise ValueError(f"connect_timeout must be > 0 seconds, got {connect_timeout}")
        self.address = address
        self._token = auth_token(secret)
        self._lock = threading.Lock()
        self._closed = False
        self._in_flight = 0  # calls inside the Flight client; the last one out after close() closes it
        try:
            self._client = flight.FlightClient(address, generic_options=connect_options(connect_timeout))
        except (flight.FlightError, pa.ArrowException, OSError) as e:
            raise BrokenChannelError(f"cannot create a Flight client for {address!r}: {e}") from e

    def __repr__(self) -> str:
        return f"RpcClient({self.address!r}{', closed' if self._closed else ''})"

    def call(self, message: Any, *, timeout: float = 30.0) -> Any:
        """Run the remote node's handler for ``type(message)`` with ``message`` and return its result.

        ``message`` and the result travel cloudpickled.

        Raises:
            Exception: the handler's own exception, if it unpickles here; the
                remote traceback is attached as a note.
            RemoteTaskError: the handler's exception could not be pickled
                there or unpickled here; it carries the type name, message
                and formatted remote traceback.
            LookupError: no handler for the message's type is registered (names the registered ones).
            RpcAuthenticationError: the node rejected the cluster secret.
            RpcTimeoutError: no answer within ``timeout`` seconds.
            BrokenChannelError: the node is unreachable or died during the call.
            ClosedChannelError: this client was closed.
        """
        name = rpc_name(type(message))
        body = cloudpickle.dumps(message)
        with self._lock:
            if self._closed:
                raise ClosedChannelError(f"{self!r} is closed")
            self._in_flight += 1
        try:
            results = list(self._client.do_action(flight.Action(name, body), call_options(self._token, timeout)))
        except (flight.FlightError, pa.ArrowException, OSError) as e:
            raise translate_flight_error(e, self.address, f"RPC {name!r}") from e
        finally:
            with self._lock:
                self._in_flight -= 1
                last_out = self._closed and self._in_flight == 0
            if last_out:
                self._close_flight_client()
        if len(results) != 1:
            raise BrokenChannelError(f"RPC {name!r} to {self.address}: expected one result, got {len(results)}")
        answer = results[0].body
        status, data = answer[:1].to_pybytes(), answer[1:]
        if status == _OK:
            return serialization.loads(data)
        if status == _ERROR:
            raise _decode_exception(data, name, self.address)
        raise BrokenChannelError(f"RPC {name!r} to {self.address}: malformed answer (status byte {status!r})")

    def close(self) -> None:
        """Close the connection (once the calls in flight returned); idempotent, does not wait."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._in_flight:
                return  # the last call in flight closes the Flight client
        self._close_flight_client()

    def _close_flight_client(self) -> None:
        try:
            self._client.close()
        except (flight.FlightError, pa.ArrowException, OSError):  # already broken: nothing to release
            pass


def connect_options(connect_timeout: float) -> list[tuple[str, int]]:
    """gRPC channel arguments bounding one connection attempt to ``connect_timeout`` seconds."""
    millis = max(1, int(connect_timeout * 1000))
    return [
        # gRPC uses the minimum reconnect backoff as the deadline of a connection attempt.
        ("grpc.min_reconnect_backoff_ms", millis),
        ("grpc.initial_reconnect_backoff_ms", min(millis, 1000)),
    ]
