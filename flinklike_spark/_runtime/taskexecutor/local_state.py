"""Task-local recovery: a TaskExecutor's local copies of its subtasks' snapshots.

Flink's ``TaskLocalStateStore`` (``execution.state-recovery.from-local``, the
deprecated ``state.backend.local-recovery``): after a subtask's snapshot is
written to the checkpoint storage (Delta), the TaskExecutor also keeps a copy
of its keyed state in its own working directory. A restarted subtask deployed
to the same TaskExecutor restores its keyed state from that copy when the
copy's checkpoint id is the one being restored; everything else (another
checkpoint, a copy lost with a killed TaskExecutor, a changed parallelism)
reads Delta as before.

Contracts:

* The copy is secondary: Delta stays the source of truth. Writing a copy never
  fails a checkpoint (an error is logged and the copy is dropped), and a
  restore that finds no usable copy reads Delta.
* One file per (job, vertex, subtask, checkpoint), written to a temporary name
  and renamed, so a restore never reads a half-written copy. A copy is only
  used for exactly the checkpoint id being restored.
* When a checkpoint completes, the subtask's copies of older checkpoints are
  deleted; the job's copies are deleted when the job is released from the
  TaskExecutor, all copies when it closes.
* What is copied: the full keyed state of every operator of the chain whose
  snapshot is self-contained and held in memory (the heap backend, windows,
  vectorized aggregations). Incremental snapshots (a chain of Delta
  checkpoints) and state produced chunk by chunk (RocksDB) are not copied;
  those operators read Delta. Operator (non-keyed) state and in-flight data
  always come from Delta: they are small.

The format is the process's own (one pickle of column lists, protocol 5):
unpickling one large list is several times faster than decoding a
Parquet file's pickled key and value cells one by one, which is where a
Delta restore spends most of its time (docs/benchmarks.md, "Task-local
recovery").
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import pickle
import shutil
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from checkpointing import KeyedColumnChunks, KeyedColumns, KeyedStateSnapshot
from flinklike_spark._runtime import serialization
from flinklike_spark._runtime.operators.stream_operator import OperatorSnapshot, RestoredEntry

log = logging.getLogger(__name__)

__all__ = ["LocalRestoreCounters", "SubtaskLocalState", "TaskLocalStateStore"]

_PREFIX = "chk-"


@dataclasses.dataclass
class LocalRestoreCounters:
    """How many restores of this TaskExecutor read keyed state locally or from Delta."""

    local: int = 0
    remote: int = 0


class TaskLocalStateStore:
    """All local snapshot copies of one TaskExecutor, under ``root`` (created on first use).

    Thread-safe: the checkpoint I/O pool stores copies while task threads load them.
    """

    def __init__(self, root: str | None = None) -> None:
        self._parent = root
        self._root: Path | None = None
        self._lock = threading.Lock()
        self.counters = LocalRestoreCounters()

    def _dir(self, job_id: str, vertex_id: str, subtask: int) -> Path:
        with self._lock:
            if self._root is None:
                self._root = Path(tempfile.mkdtemp(prefix="localState-", dir=self._parent))
            return self._root / job_id / f"{vertex_id}_{subtask}"

    def for_subtask(self, job_id: str, vertex_id: str, subtask: int) -> SubtaskLocalState:
        return SubtaskLocalState(self, job_id, vertex_id, subtask)

    def release_job(self, job_id: str) -> None:
        """Delete every copy of ``job_id`` (its slots were freed on this TaskExecutor)."""
        with self._lock:
            root = self._root
        if root is not None:
            shutil.rmtree(root / job_id, ignore_errors=True)

    def close(self) -> None:
        """Delete every copy (the TaskExecutor exits)."""
        with self._lock:
            root, self._root = self._root, None
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)


class SubtaskLocalState:
    """The local copies of one subtask (job, vertex, subtask index), whatever its attempt."""

    def __init__(self, store: TaskLocalStateStore, job_id: str, vertex_id: str, subtask: int) -> None:
        self._store = store
        self._job_id = job_id
        self._vertex_id = vertex_id
        self._subtask = subtask

    def _path(self, checkpoint_id: int) -> Path:
        return self._store._dir(self._job_id, self._vertex_id, self._subtask) / f"{_PREFIX}{checkpoint_id}"

    def store(self, checkpoint_id: int, snapshots: Iterable[tuple[str, OperatorSnapshot | None]]) -> None:
        """Keep a copy of the keyed state of ``snapshots`` (written to Delta already). Never raises."""
        path = self._path(checkpoint_id)
        try:
            copy = _copyable(snapshots)
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = path.with_name(f".{path.name}.{threading.get_ident()}.tmp")
            with temporary.open("wb") as file:
                pickle.dump(copy, file, protocol=5)
            os.replace(temporary, path)
        except Exception:  # noqa: BLE001 - a local copy is an optimization; Delta holds the checkpoint
            path.unlink(missing_ok=True)  # never leave an older copy under this checkpoint id
            log.warning("could not keep a local copy of checkpoint %d of %s/%d", checkpoint_id,
                        self._vertex_id, self._subtask, exc_info=True)  # fmt: skip

    def confirm(self, checkpoint_id: int) -> None:
        """``checkpoint_id`` completed: delete the copies of older checkpoints."""
        directory = self._store._dir(self._job_id, self._vertex_id, self._subtask)
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return
        for name in names:
            if (
                name.startswith(_PREFIX)
                and name[len(_PREFIX) :].isdigit()
                and int(name[len(_PREFIX) :]) < checkpoint_id
            ):
                (directory / name).unlink(missing_ok=True)

    def load(self, checkpoint_id: int) -> dict[str, tuple[RestoredEntry, ...]] | None:
        """``uid -> keyed entries`` of the copy of exactly ``checkpoint_id``, or None (read Delta).

        Only operators listed in the result are covered by the copy; an operator
        missing from it reads its keyed state from Delta.
        """
        path = self._path(checkpoint_id)
        try:
            with path.open("rb") as file:
                copy: dict[str, list[tuple[str, str, Any, list, list]]] = pickle.loads(file.read())
        except FileNotFoundError:
            self._store.counters.remote += 1
            return None
        except Exception:  # noqa: BLE001 - a damaged copy is ignored: Delta holds the checkpoint
            log.warning("ignoring the unreadable local copy %s", path, exc_info=True)
            self._store.counters.remote += 1
            return None
        self._store.counters.local += 1
        return {uid: _restored(states, self._subtask) for uid, states in copy.items()}


def _copyable(snapshots: Iterable[tuple[str, OperatorSnapshot | None]]) -> dict[str, list]:
    """``uid -> [(state name, kind, key groups, keys, values)]`` of the operators a copy can cover."""
    copy: dict[str, list] = {}
    for uid, snapshot in snapshots:
        if snapshot is None:
            copy[uid] = []
            continue
        if snapshot.chain is not None or snapshot.keyed_changes:
            continue  # incremental: its keyed state is a chain of Delta checkpoints
        states = []
        for part in snapshot.keyed:
            if not isinstance(part, KeyedStateSnapshot) or isinstance(part.entries, KeyedColumnChunks):
                break  # produced chunk by chunk (RocksDB): not held in memory, not copied
            entries = part.entries
            if isinstance(entries, KeyedColumns):
                states.append((part.name, str(part.kind), entries.key_groups.tolist(), entries.keys, entries.values))
            else:
                rows = list(entries)
                states.append((part.name, str(part.kind), [r[0] for r in rows], [r[1] for r in rows],
                               [r[2] for r in rows]))  # fmt: skip
        else:
            copy[uid] = states
    return copy


def _restored(states: list[tuple[str, str, list, list, list]], subtask: int) -> tuple[RestoredEntry, ...]:
    with serialization.paused_gc():  # 500k live tuples: collections would find nothing to free
        entries: list[RestoredEntry] = []
        make = functools.partial(tuple.__new__, RestoredEntry)
        for name, kind, groups, keys, values in states:
            n = len(keys)
            entries.extend(map(make, zip([name] * n, [kind] * n, groups, keys, values, [subtask] * n)))
        return tuple(entries)
