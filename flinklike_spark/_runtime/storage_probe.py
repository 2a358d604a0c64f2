"""Probing a job's storage when it is submitted, before any task is deployed.

Flink's JobMaster initializes the checkpoint storage when a job starts and
fails the submission if it cannot. Here a storage location that cannot work
(a checkpoint directory under ``/proc``, a file where a directory belongs, a
read-only mount, a wrong endpoint, port or bucket) used to fail every
checkpoint or every commit, and the restart strategy restarted the job until
it was killed. :func:`probe_job_storage` checks, on the client:

* ``execution.checkpointing.dir``: created if missing (local), a marker file
  written and deleted through fsspec; on an object store also a tiny Delta
  table created and deleted through delta-rs, whose client and options are
  not fsspec's (a misconfigured delta-rs endpoint is found only so).
* ``execution.state-recovery.path``: its checkpoint directory exists and lists.
* every connector location a bound connector declares
  (:class:`~flinklike_spark.storage.DeclaresStorageLocations`: DeltaSink's
  table, FileSink's directory), by its access.

One probe per distinct location, all at once, each on its own daemon thread,
bounded by ``timeout`` as a whole; the clients get short timeouts and few
retries too, so a closed port or an unknown host fails in seconds. A location
that works at submission and fails later keeps the normal path: the task or
checkpoint fails and the restart strategy decides.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any, Final

import pyarrow as pa

from flinklike_spark._runtime.graph.job_graph import JobGraph
from flinklike_spark.config import Configuration
from flinklike_spark.errors import CheckpointNotFoundError, StorageUnavailableError
from flinklike_spark.storage import (
    AZURE_SCHEMES,
    S3_SCHEMES,
    DeclaresStorageLocations,
    StorageAccess,
    StorageLocation,
    url_scheme,
)

__all__ = ["PROBE_TIMEOUT", "job_storage_locations", "probe_job_storage", "probe_storage"]

log = logging.getLogger(__name__)

#: How long the probes of one job may take together.
PROBE_TIMEOUT: Final = timedelta(seconds=20)
_OBJECT_STORES: Final = S3_SCHEMES | AZURE_SCHEMES | {"gs", "gcs"}
# botocore (s3fs): connect and read timeouts in seconds, two attempts instead of five with backoff.
_S3FS_TIMEOUTS: Final = {"connect_timeout": 5, "read_timeout": 10, "retries": {"max_attempts": 2}}
# object_store (delta-rs) client and retry settings; its default retries for up to three minutes.
_DELTA_TIMEOUTS: Final = {"connect_timeout": "5s", "timeout": "10s", "max_retries": "1", "retry_timeout": "10s"}
_MARKER: Final = b"flinklike-spark storage probe; safe to delete\n"


def job_storage_locations(job_graph: JobGraph, config: Configuration) -> list[StorageLocation]:
    """The locations of a job the probe checks: checkpoint dir, restore path, declared connector locations.

    Call it after :func:`~flinklike_spark._runtime.graph.translation.bind_storage`,
    so that connectors declare their locations with the job's storage settings.
    """
    # imported here: checkpointing imports the public package, which imports this module (via targets)
    from checkpointing import CheckpointLayout
    from flinklike_spark._runtime.jobmaster.recovery import recovery_directory

    storage = config.storage
    options = config.checkpointing
    locations: list[StorageLocation] = []
    if options.directory is not None:
        layout = CheckpointLayout(base_url=options.directory, storage=storage)
        locations.append(StorageLocation(url=options.directory, what="execution.checkpointing.dir",
                                         access=StorageAccess.WRITE, options=layout.options(), delta=True))  # fmt: skip
    if options.recovery_path is not None:
        directory = recovery_directory(options.recovery_path)
        what = "execution.state-recovery.path" + (
            f" {options.recovery_path!r}: its checkpoint directory" if directory != options.recovery_path else ""
        )
        locations.append(StorageLocation(url=directory, what=what, access=StorageAccess.READ,
                                         options=storage.options(directory)))  # fmt: skip
    for vertex in job_graph:
        for op in vertex.operators:
            if isinstance(op.function, DeclaresStorageLocations):
                locations.extend(
                    dataclasses.replace(location, what=f"operator {op.name!r} ({location.what})")
                    for location in op.function.storage_locations()
                )
    return locations


def probe_job_storage(job_graph: JobGraph, config: Configuration, *, timeout: timedelta = PROBE_TIMEOUT) -> None:
    """Probe every storage location of the job (see the module docstring).

    Raises:
        StorageUnavailableError: a location cannot be written or read, or did
            not answer within ``timeout``; names the setting, the URL and the cause.
        CheckpointNotFoundError: the restore path's checkpoint directory does not exist.
    """
    probe_storage(job_storage_locations(job_graph, config), timeout=timeout)


def probe_storage(locations: Iterable[StorageLocation], *, timeout: timedelta = PROBE_TIMEOUT) -> None:
    """Probe ``locations`` concurrently, once per distinct URL; raise the first failure in their order.

    A URL given for reading and writing is probed for writing; a URL that
    delta-rs reaches for one of its uses is probed through delta-rs too.

    Raises:
        StorageUnavailableError: see :func:`probe_job_storage`.
        CheckpointNotFoundError: a location to read does not exist.
    """
    distinct: dict[str, StorageLocation] = {}
    for location in locations:
        key = _normalized(location.url)
        known = distinct.get(key)
        if known is None:
            distinct[key] = location
        else:
            write = StorageAccess.WRITE in (known.access, location.access)
            distinct[key] = dataclasses.replace(
                known if known.access is StorageAccess.WRITE or not write else location,
                delta=known.delta or location.delta,
            )
    if not distinct:
        return
    probes = [_Probe(location) for location in distinct.values()]
    for probe in probes:
        probe.start()
    deadline = time.monotonic() + timeout.total_seconds()
    for probe in probes:
        probe.join(max(0.0, deadline - time.monotonic()))
    for probe in probes:
        probe.raise_failure(timeout)


class _Probe(threading.Thread):
    """One location's probe on a daemon thread (a hung client must not keep the interpreter from exiting)."""

    def __init__(self, location: StorageLocation) -> None:
        super().__init__(name=f"storage-probe {location.url}", daemon=True)
        self.location = location
        self.failure: BaseException | None = None
        self.finished = False
        self.steps: list[str] = []  # what the probe did, the last one failed or hangs

    def run(self) -> None:
        started = time.monotonic()
        try:
            _probe(self.location, self.steps)
        except BaseException as exc:  # noqa: BLE001 - raised on the submitting thread by raise_failure
            self.failure = exc
        finally:
            self.finished = True
            log.debug("storage probe of %s (%s) took %.3f s", self.location.url, self.location.access.value,
                      time.monotonic() - started)  # fmt: skip

    def raise_failure(self, timeout: timedelta) -> None:
        location = self.location
        step = f" ({self.steps[-1]})" if self.steps else ""
        if not self.finished:
            raise StorageUnavailableError(
                f"{location.what} {location.url!r} did not answer within {timeout.total_seconds():g} s{step}; "
                f"the job was not started. Check that the store is reachable from this machine and that the "
                f"endpoint and its port are right",
                url=location.url, what=location.what,
            )  # fmt: skip
        exc = self.failure
        if exc is None:
            return
        if isinstance(exc, CheckpointNotFoundError):
            raise exc
        verb = "written" if location.access is StorageAccess.WRITE else "read"
        raise StorageUnavailableError(
            f"{location.what} {location.url!r} cannot be {verb}{step}: {type(exc).__name__}: "
            f"{_first_lines(exc)}; the job was not started (every checkpoint or commit there would fail, and "
            f"the job would restart for ever). Fix the path, its permissions or the store's settings",
            url=location.url, what=location.what,
        ) from exc  # fmt: skip


def _probe(location: StorageLocation, steps: list[str]) -> None:
    from checkpointing.layout import delta_uri, resolve_storage

    scheme = url_scheme(location.url)
    fsspec_options = _with_timeouts(scheme, location.options.fsspec)
    endpoint = fsspec_options.get("endpoint_url") or location.options.delta.get("azure_storage_endpoint")
    steps.append("through fsspec" + (f", endpoint {endpoint}" if endpoint else ""))
    fs, root = resolve_storage(location.url, fsspec_options)
    if location.access is StorageAccess.READ:
        if not fs.exists(root):
            raise CheckpointNotFoundError(f"{location.what} {location.url!r} does not exist", url=location.url)
        fs.ls(root, detail=False)
        return
    if scheme not in _OBJECT_STORES:
        # never on object stores: s3fs's makedirs creates a missing *bucket*, a misspelt one too
        fs.makedirs(root, exist_ok=True)
    marker = f"{root}/.flinklike-probe-{uuid.uuid4().hex}"
    fs.pipe_file(marker, _MARKER)
    _remove(fs, marker, location, recursive=False)
    if location.delta and scheme in _OBJECT_STORES:
        from deltalake import DeltaTable

        table = f"{root}/_flinklike_probe_{uuid.uuid4().hex}"
        options = {**location.options.delta, **_DELTA_TIMEOUTS}
        endpoint = options.get("AWS_ENDPOINT_URL") or options.get("azure_storage_endpoint")
        steps.append("creating a Delta table through delta-rs" + (f", endpoint {endpoint}" if endpoint else ""))
        DeltaTable.create(delta_uri(fs, table), pa.schema([("probe", pa.int8())]), mode="error",
                          storage_options=options)  # fmt: skip
        fs.invalidate_cache()
        _remove(fs, table, location, recursive=True)


def _remove(fs: Any, path: str, location: StorageLocation, *, recursive: bool) -> None:
    # A store may allow writes but not deletes; the job can still run (retention will fail later).
    try:
        fs.rm(path, recursive=recursive)
    except OSError as exc:
        log.warning("storage probe: could not delete %r under %s %r (%s: %s); delete it by hand", path,
                    location.what, location.url, type(exc).__name__, exc)  # fmt: skip


def _with_timeouts(scheme: str, options: Mapping[str, Any]) -> dict[str, Any]:
    if scheme not in S3_SCHEMES:
        return dict(options)
    config = dict(options.get("config_kwargs") or {})
    return {**options, "config_kwargs": {**config, **_S3FS_TIMEOUTS}}


def _normalized(url: str) -> str:
    url = str(url).rstrip("/")
    if not url_scheme(url):
        return os.path.abspath(url)
    return url.removeprefix("file://") if url.startswith("file:///") else url


_ANSI_ESCAPE: Final = re.compile(r"\x1b\[[0-9;]*m")


def _first_lines(exc: BaseException, limit: int = 6) -> str:
    lines = _ANSI_ESCAPE.sub("", str(exc)).strip().splitlines()
    return "\n".join(lines[:limit]) + (" ..." if len(lines) > limit else "")
