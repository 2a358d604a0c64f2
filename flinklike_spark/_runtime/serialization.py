"""Unpickling that is safe to run on many threads of one process at once.

Unpickling imports the modules that pickled classes and functions live in.
When two threads import the same package concurrently (one the package
``connectors`` whose ``__init__`` imports ``connectors.files``, the other
``connectors.files`` directly), each can hold one module's import lock and
wait for the other's: Python breaks the cycle by raising
``_DeadlockError: deadlock detected by _ModuleLock('connectors.files')`` in one
of them. Task deployments arrive on several RPC threads of a TaskExecutor at
the same moment, in a fresh process, so this happened to about one small job
in thirty.

:func:`loads` serializes every unpickling of this process behind one lock, so
at most one thread imports on behalf of a pickle at a time. Everything the
runtime unpickles (RPC payloads and answers, restored state) goes through it.
The lock is reentrant (an object's ``__setstate__`` may unpickle again) and
held only while bytes are turned into objects, never while they are used.
"""

from __future__ import annotations

import contextlib
import gc
import pickle
import threading
from collections.abc import Iterator
from typing import Any

import cloudpickle

__all__ = ["loads", "loads_many"]

_UNPICKLE_LOCK = threading.RLock()


def loads(data: bytes | bytearray | memoryview | Any) -> Any:
    """``cloudpickle.loads(data)``, one thread of this process at a time."""
    with _UNPICKLE_LOCK:
        return cloudpickle.loads(data)


def loads_many(payloads: list) -> list:
    """``[loads(p) for p in payloads]`` (None stays None) under one acquisition of the lock.

    Restores unpickle a million small keys and values at a time: taking the
    lock once, and calling the C unpickler directly, is several times faster
    than per-item :func:`loads`. ``pickle.loads`` reads everything
    ``cloudpickle.dumps`` writes (cloudpickle's ``loads`` is ``pickle.loads``).
    """
    unpickle = pickle.loads
    with _UNPICKLE_LOCK:
        return [None if p is None else unpickle(p) for p in payloads]


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while many small acyclic objects are built.

    Unpickling or building hundreds of thousands of tuples (a restore of keyed
    state) otherwise triggers collections that each traverse the whole heap:
    measured 85% of building 500k restored entries (0.44 s -> 0.065 s). What is
    built stays alive (it is the restored state), so the paused collections
    would have found nothing; a pause only defers collection, so even a user
    value with reference cycles is collected later. The collector's previous
    state is restored on exit.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
