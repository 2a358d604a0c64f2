"""``python -m flinklike_spark._runtime.cluster.process_main``: a TaskExecutor process.

The parent writes a length-prefixed, cloudpickled
:class:`~flinklike_spark._runtime.cluster.launcher.TaskExecutorBootstrap` to
our stdin (resource id, configuration, cluster secret, JobMaster address,
host, log level, sys.path) and
keeps the pipe open: EOF on stdin means the parent died, and we exit, so no
TaskExecutor outlives its cluster. The secret never appears on a command line.

SIGINT is ignored: Ctrl-C in a terminal reaches the whole process group, and it
is the client's job to cancel the job and shut its TaskExecutors down (a
TaskExecutor dying on its own would fail the job with a lost-TaskExecutor error
while the client is still cancelling it).

The process is named ``taskexecutor`` (``ps -e``, ``top``, psutil's
``name()``), whether it was spawned or forked from the fork server (whose
command line its children share).

``faulthandler`` is enabled first thing: a native crash (SIGSEGV, SIGABRT, ...)
in the TaskExecutor then leaves every thread's Python stack on its stderr. And,
as the JVM's ``kill -3`` does for a Flink TaskManager, ``kill -USR1 <pid>``
writes every thread's stack of a running TaskExecutor to its stderr, or, when
the environment names a directory in ``FLINKLIKE_STACK_DUMP_DIR``, to
``taskexecutor-<pid>.txt`` there (the test suite collects those of a test that
timed out).
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import sys
import threading

TASK_EXECUTOR_PROCESS_NAME = b"taskexecutor"
"""The name of every local TaskExecutor process (spawned or forked) in ``ps -e`` and ``psutil``."""

STACK_DUMP_DIR_ENV = "FLINKLIKE_STACK_DUMP_DIR"
"""Environment variable: the directory where ``kill -USR1`` writes a TaskExecutor's stacks (else stderr)."""

_stack_dump_file = None  # kept open for the process's life: faulthandler writes to its descriptor


def stack_dump_path(directory: str | os.PathLike[str], pid: int) -> str:
    """Where TaskExecutor ``pid`` writes its stacks on SIGUSR1 when ``FLINKLIKE_STACK_DUMP_DIR`` is ``directory``."""
    return os.path.join(directory, f"taskexecutor-{pid}.txt")


def _dump_stacks_on_sigusr1() -> None:
    global _stack_dump_file
    target = sys.stderr
    directory = os.environ.get(STACK_DUMP_DIR_ENV)
    if directory:
        _stack_dump_file = target = open(stack_dump_path(directory, os.getpid()), "a")  # noqa: SIM115
    faulthandler.register(signal.SIGUSR1, file=target, all_threads=True)


def _exit_when_parent_dies(stream) -> None:
    stream.read()  # returns at EOF: the parent closed the pipe or died
    logging.getLogger(__name__).warning("parent process gone; TaskExecutor exits")
    os._exit(3)


def name_process(name: bytes) -> None:
    """Set this process's name as ``ps -e``, ``top`` and psutil's ``name()`` show it (Linux; at most 15 bytes)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(15, name, 0, 0, 0)  # PR_SET_NAME


def main() -> None:
    faulthandler.enable(all_threads=True)
    _dump_stacks_on_sigusr1()
    name_process(TASK_EXECUTOR_PROCESS_NAME)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from flinklike_spark._runtime.cluster.launcher import TaskExecutorBootstrap

    stdin = sys.stdin.buffer
    length = int.from_bytes(stdin.read(8), "big")
    bootstrap = TaskExecutorBootstrap.from_bytes(stdin.read(length))
    for entry in reversed(bootstrap.sys_path):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    threading.Thread(target=_exit_when_parent_dies, args=(stdin,), name="parent-watch", daemon=True).start()

    from flinklike_spark._runtime.taskexecutor.task_executor import run_task_executor_process

    run_task_executor_process(bootstrap)


if __name__ == "__main__":
    main()
