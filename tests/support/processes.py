"""Finding local TaskExecutor processes: each is named ``taskexecutor`` (``ps -e``, psutil's ``name()``),
whether it was forked from the client's fork server (whose command line it shares) or spawned."""

from __future__ import annotations

import psutil

from flinklike_spark._runtime.cluster.process_main import TASK_EXECUTOR_PROCESS_NAME

__all__ = ["is_task_executor", "task_executors_under"]


def is_task_executor(process: psutil.Process) -> bool:
    """Whether ``process`` is a live local TaskExecutor (False once it exited)."""
    try:
        return process.name() == TASK_EXECUTOR_PROCESS_NAME.decode() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def task_executors_under(pid: int) -> list[psutil.Process]:
    """The live TaskExecutor processes among ``pid``'s descendants (none if ``pid`` is gone)."""
    try:
        descendants = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [process for process in descendants if is_task_executor(process)]
