"""A fork server for local TaskExecutor processes: imports once, forks each TaskExecutor.

Starting ``python -m flinklike_spark._runtime.cluster.process_main`` costs about
half a second of CPU before the TaskExecutor does anything: importing pyarrow,
its Flight RPC, deltalake and pandas. A job that restarts a region, or a test
suite that starts hundreds of local clusters, pays it for every TaskExecutor.
Like Python's ``multiprocessing`` "forkserver" start method, :class:`ForkServer`
starts one single-threaded helper process per client (``python -m
flinklike_spark._runtime.cluster.fork_server``) that imports the TaskExecutor's
modules once and then forks a child per request; each child becomes a
TaskExecutor exactly as a spawned ``process_main`` would: it reads its bootstrap
from a stdin pipe whose other end the client holds, in the environment and
working directory of the request.

The helper is forked from nothing but imports: it opens no RPC channel and
starts no deltalake runtime (delta-rs refuses to run in a child forked after its
runtime started), and ``gc.freeze()`` keeps the imported objects out of the
children's copy-on-write faults. The client's process is never forked (it runs
threads, a JVM gateway, ...).

The helper forks only while it is single-threaded: a child forked from a
process with other threads inherits any lock those threads held, and Python
3.12+ warns about it. Importing numpy starts an OpenBLAS worker thread and
pyarrow and deltalake each start a jemalloc background thread, so the helper
starts with ``OPENBLAS_NUM_THREADS=1`` and jemalloc's background threads off
(:data:`_SINGLE_THREADED_ENV`; the children run with the request's environment
all the same). Before each fork it counts its threads; if anything started one,
it refuses the request and the client spawns a fresh interpreter instead.

Protocol, over a Unix socket pair whose one end is the helper's fd ``argv[1]``:
the client sends one pickled request per TaskExecutor, ``(env, cwd)``, with four
file descriptors (``SCM_RIGHTS``): the read end of the child's stdin pipe, the
client's fds 1 and 2 as they are now (what a spawned child would inherit; the
helper's own may be long gone, a finished test's captured output, say), and a
status socket. The helper answers on the status socket with the child's pid
(8 bytes) and, once it has reaped the child, its return code (8 bytes, signed,
negative for a signal as in :class:`subprocess.Popen`). EOF on the control
socket (the client closed it, or died) makes the helper exit; its children,
whose stdin pipes the client held, exit on their own.
"""

from __future__ import annotations

import gc
import logging
import os
import pickle
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time

__all__ = ["ForkServer", "ForkedProcess", "fork_server"]

log = logging.getLogger(__name__)

_PRELOAD = (
    "flinklike_spark._runtime.cluster.launcher",
    "flinklike_spark._runtime.taskexecutor.task_executor",
    "flinklike_spark.datastream",
    "deltalake",
    "pyarrow.dataset",
    "pyarrow.parquet",
)
"""What every TaskExecutor imports anyway; importing it in the helper is the point of the helper."""

_SINGLE_THREADED_ENV = {
    "OPENBLAS_NUM_THREADS": "1",  # numpy's BLAS pool: one thread is the caller's
    "JE_ARROW_MALLOC_CONF": "background_thread:false",  # pyarrow's jemalloc
    "_RJEM_MALLOC_CONF": "background_thread:false",  # deltalake's (Rust) jemalloc
}
"""The helper's environment additions that keep its preloading imports from starting threads."""

_REFUSED = 0
"""The pid the helper answers when it will not fork (it has threads); the client then spawns."""

_START_TIMEOUT_SECONDS = 60.0
_POLL_SECONDS = 0.5
_INT = 8


class _HelperGone(OSError):
    """The helper died before it forked the requested child (a new one may be started)."""


class ForkedProcess:
    """A TaskExecutor forked by the helper: the :class:`subprocess.Popen` surface the launcher uses."""

    def __init__(self, pid: int, stdin, status: socket.socket) -> None:
        self.pid = pid
        self.stdin = stdin
        self.returncode: int | None = None
        self._status = status
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        return self._read_status(timeout=0.0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._read_status(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"TaskExecutor pid {self.pid}", timeout)
        return code

    def kill(self) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # exited since poll(); its return code is on the way

    def _read_status(self, timeout: float | None) -> int | None:
        with self._lock:
            if self.returncode is None:
                self._status.settimeout(timeout)
                try:
                    data = _recv_exactly(self._status, _INT)
                except (BlockingIOError, TimeoutError):
                    return None
                # EOF without a code: the helper died before reaping the child. The child, a child of
                # the helper, was re-parented; it is gone for us (its stdin pipe is ours to close).
                self.returncode = int.from_bytes(data, "big", signed=True) if data else -signal.SIGKILL
                self._status.close()
            return self.returncode


class ForkServer:
    """The client's handle on its helper. :meth:`spawn` forks one TaskExecutor process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._control: socket.socket | None = None

    def spawn(self, env: dict[str, str], cwd: str | None) -> ForkedProcess:
        """Fork a TaskExecutor child with ``env`` and ``cwd``; its ``stdin`` is ours to write the bootstrap to.

        A helper that died (killed, say) is replaced once. Raises OSError when no helper can be started
        or reached (the caller then spawns instead).
        """
        try:
            return self._spawn_once(env, cwd)
        except _HelperGone:
            return self._spawn_once(env, cwd)

    def _spawn_once(self, env: dict[str, str], cwd: str | None) -> ForkedProcess:
        stdin_read, stdin_write = os.pipe()
        status_ours, status_theirs = socket.socketpair()
        try:
            message = pickle.dumps((env, cwd))
            with self._lock:
                process, control = self._ensure_started(env)
                try:
                    fds = [stdin_read, 1, 2, status_theirs.fileno()]  # stdin, stdout, stderr, status
                    socket.send_fds(control, [len(message).to_bytes(_INT, "big") + message], fds)
                except OSError as exc:
                    self._discard()
                    raise _HelperGone(f"cannot reach the TaskExecutor fork server: {exc}") from exc
            os.close(stdin_read)
            stdin_read = -1  # closed: its number may belong to another thread's file by now
            status_theirs.close()
            data = self._await_pid(process, status_ours)
        except BaseException:
            for fd in (stdin_read, stdin_write):
                if fd >= 0:
                    os.close(fd)
            status_ours.close()
            status_theirs.close()
            raise
        return ForkedProcess(int.from_bytes(data, "big"), os.fdopen(stdin_write, "wb"), status_ours)

    def _await_pid(self, process: subprocess.Popen, status: socket.socket) -> bytes:
        """The forked child's pid, as the helper sends it; _HelperGone if the helper died meanwhile.

        Polled: a helper killed just before the request can still look alive (its threads are still
        exiting, so ``waitpid`` does not report it yet) and accept the request it will never answer.
        """
        deadline = time.monotonic() + _START_TIMEOUT_SECONDS
        status.settimeout(_POLL_SECONDS)
        while True:
            try:
                data = _recv_exactly(status, _INT)
            except TimeoutError:
                data = None
            if data:
                if int.from_bytes(data, "big") == _REFUSED:
                    detail = b"".join(iter(lambda: status.recv(4096), b"")).decode(errors="replace")
                    raise OSError(f"the TaskExecutor fork server does not fork while it has threads ({detail})")
                return data
            if data == b"" or process.poll() is not None:
                with self._lock:
                    if self._process is process:
                        self._discard()
                raise _HelperGone("the TaskExecutor fork server exited before it forked")
            if time.monotonic() > deadline:
                raise OSError(f"the TaskExecutor fork server did not fork within {_START_TIMEOUT_SECONDS:.0f} s")

    @property
    def pid(self) -> int | None:
        """The helper's pid while it runs (it starts with the first :meth:`spawn`)."""
        with self._lock:
            return self._process.pid if self._process is not None and self._process.poll() is None else None

    def close(self) -> None:
        """Stop the helper (its running children keep running); the next :meth:`spawn` starts a new one."""
        with self._lock:
            self._discard()

    def _ensure_started(self, env: dict[str, str]) -> tuple[subprocess.Popen, socket.socket]:
        if self._process is not None and self._process.poll() is None and self._control is not None:
            return self._process, self._control
        self._discard()
        ours, theirs = socket.socketpair()
        helper_env = {**_SINGLE_THREADED_ENV, **env}  # the caller's own settings of these win
        helper_env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in sys.path if p)
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", __name__, str(theirs.fileno())], pass_fds=[theirs.fileno()], env=helper_env,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip
        finally:
            theirs.close()
        self._control = ours
        log.debug("started the TaskExecutor fork server (pid %d)", self._process.pid)
        return self._process, ours

    def _discard(self) -> None:
        if self._control is not None:
            self._control.close()  # EOF: the helper exits
            self._control = None
        if self._process is not None:
            try:
                self._process.wait(5.0)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(5.0)
            self._process = None


_SERVER_LOCK = threading.Lock()
_SERVER: ForkServer | None = None


def fork_server() -> ForkServer:
    """This process's fork server (one per client process; its helper starts with the first spawn)."""
    global _SERVER
    with _SERVER_LOCK:
        if _SERVER is None:
            _SERVER = ForkServer()
        return _SERVER


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    """``size`` bytes, or b"" on EOF before the first byte."""
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            if data:
                raise OSError(f"short read from the TaskExecutor fork server ({len(data)} of {size} bytes)")
            return b""
        data += chunk
    return data


# --- the helper process ------------------------------------------------------------------------


def _serve(control: socket.socket) -> tuple[dict[str, str], str | None] | None:
    """Fork a child per request until the control socket closes. Returns None in the helper (time to
    exit); returns the request in each forked child, with the helper's sockets and handlers gone."""
    wakeup_read, wakeup_write = os.pipe()
    os.set_blocking(wakeup_write, False)
    signal.set_wakeup_fd(wakeup_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: dict[int, socket.socket] = {}
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ)
    selector.register(wakeup_read, selectors.EVENT_READ)
    while True:
        for key, _ in selector.select():
            if key.fileobj == wakeup_read:
                os.read(wakeup_read, 4096)
                _reap(children)
                continue
            request = _receive_request(control)
            if request is None:
                return None
            message, stdio, status_fd = request
            status = socket.socket(fileno=status_fd)
            threads = _thread_names()
            if len(threads) > 1:
                for fd in stdio:
                    os.close(fd)
                with status:
                    detail = f"{len(threads)} threads: {', '.join(threads)}".encode()[:4096]
                    status.sendall(_REFUSED.to_bytes(_INT, "big") + detail)
                continue
            pid = os.fork()
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                selector.close()
                for fd in (wakeup_read, wakeup_write):
                    os.close(fd)
                for other in children.values():
                    other.close()
                status.close()
                control.close()
                for target, fd in enumerate(stdio):
                    os.dup2(fd, target)
                    os.close(fd)
                return message
            for fd in stdio:
                os.close(fd)
            status.sendall(pid.to_bytes(_INT, "big"))
            children[pid] = status
            _reap(children)


def _thread_names() -> list[str]:
    """The names of this process's threads, native ones included (Linux's /proc; elsewhere Python's threads)."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return [t.name for t in threading.enumerate()]
    names = []
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/comm") as comm:
                names.append(comm.read().strip())
        except OSError:
            pass  # the thread ended meanwhile
    return names


def _receive_request(control: socket.socket):
    header, fds, _flags, _addr = socket.recv_fds(control, _INT, 4)
    if not header:
        return None
    length = int.from_bytes(header, "big")
    payload = b""
    while len(payload) < length:
        chunk = control.recv(length - len(payload))
        if not chunk:
            return None
        payload += chunk
    *stdio, status_fd = fds
    return pickle.loads(payload), stdio, status_fd


def _reap(children: dict[int, socket.socket]) -> None:
    for pid in list(children):
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done, status = pid, 0
        if done:
            sock = children.pop(pid)
            try:
                sock.sendall(os.waitstatus_to_exitcode(status).to_bytes(_INT, "big", signed=True))
            except OSError:
                pass  # the client is gone or stopped listening
            sock.close()


def _become_task_executor(request: tuple[dict[str, str], str | None]) -> None:
    env, cwd = request
    os.environ.clear()
    os.environ.update(env)
    if cwd is not None:
        os.chdir(cwd)
    import random
    import tempfile

    tempfile.tempdir = None  # re-read TMPDIR from the request's environment
    random.seed()
    gc.unfreeze()
    sys.argv = [sys.argv[0]]


def main() -> None:
    from flinklike_spark._runtime.cluster.process_main import name_process

    name_process(b"tm-forkserver")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a TaskExecutor: the client cancels, Ctrl-C does not
    control = socket.socket(fileno=int(sys.argv[1]))
    for module in _PRELOAD:
        __import__(module)
    gc.collect()
    gc.freeze()
    request = _serve(control)
    if request is None:
        return
    _become_task_executor(request)
    from flinklike_spark._runtime.cluster import process_main

    process_main.main()


if __name__ == "__main__":
    main()
