"""What the RocksDB state backend keeps outside the Python heap: directories, local snapshots, freed memory.

* Instance directories: one per backend, ``<pid>-<random>`` under
  ``<state.backend.rocksdb.localdir>/flinklike-rocksdb``; those of processes
  that no longer run (a SIGKILLed TaskExecutor) are removed by the next backend
  created on the machine (:func:`remove_stale_dirs`).
* Local snapshots (:class:`LocalSnapshot`): a RocksDB checkpoint directory that
  the asynchronous part of a checkpoint scans read-only, deleted when the last
  reader of it is garbage-collected.
* :func:`release_freed_memory`: glibc's ``malloc_trim``, after a restore and at close.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["DIR_PREFIX", "LocalSnapshot", "release_freed_memory", "remove_stale_dirs"]

#: Name of the directory (under ``state.backend.rocksdb.localdir``) holding every instance directory.
DIR_PREFIX = "flinklike-rocksdb"


# -- memory ----------------------------------------------------------------------------------------


def _load_malloc_trim() -> Callable[[int], int] | None:
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


_MALLOC_TRIM = _load_malloc_trim()


def release_freed_memory() -> None:
    """Return memory freed to glibc's arenas to the OS (no-op elsewhere).

    glibc keeps one arena per thread that allocated; a restarted task runs on a
    new thread, so what the previous attempt's cache and restore freed would stay
    resident beside what the new attempt allocates. Called after a restore and at
    ``close``.
    """
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


# -- directories -----------------------------------------------------------------------------------


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_dirs(parent: str) -> None:
    """Remove instance directories of processes that no longer run (e.g. a SIGKILLed TaskExecutor)."""
    with contextlib.suppress(OSError):
        for name in os.listdir(parent):
            pid_text = name.split("-", 1)[0]
            if pid_text.isdigit() and int(pid_text) != os.getpid() and not _pid_alive(int(pid_text)):
                shutil.rmtree(os.path.join(parent, name), ignore_errors=True)


# -- local snapshots -------------------------------------------------------------------------------


class LocalSnapshot:
    """A RocksDB checkpoint directory, opened read-only on first use, closed and deleted when
    this object is garbage-collected (or by the backend's ``close``)."""

    def __init__(self, path: str, open_read_only: Callable[[str], Any]) -> None:
        self.path = path
        self._open = open_read_only
        self._lock = threading.Lock()
        self._db: list[Any] = []  # the open instance, shared with the finalizer
        self._finalizer = weakref.finalize(self, _drop_local_snapshot, self._db, path)

    def reader(self) -> Any:
        with self._lock:
            if not self._db:
                self._db.append(self._open(self.path))
            return self._db[0]


def _drop_local_snapshot(opened: list, path: str) -> None:
    for db in opened:
        with contextlib.suppress(Exception):
            db.close()
    opened.clear()
    shutil.rmtree(path, ignore_errors=True)
