"""Where a job's checkpoints live: Flink's ``execution.checkpointing.storage``.

``filesystem`` keeps them in ``execution.checkpointing.dir``, which outlives
the job: a later job resumes from it (``execution.state-recovery.path``) and
savepoints go there. ``jobmanager`` (the default when checkpointing is enabled
without a directory, as after PyFlink's bare ``env.enable_checkpointing(ms)``)
keeps them for the job's lifetime only: Flink holds them in the JobManager's
heap; here they go to a private temporary directory created when the job is
submitted and deleted when it ends. Failover within the job restores from it
(a lost TaskExecutor's tasks restart from the latest checkpoint); nothing can
be resumed after the job ended, and savepoints are refused. The TaskExecutors
write that directory, so it must be local to them: TaskExecutors on other hosts
need ``execution.checkpointing.dir`` on shared storage.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import tempfile
from pathlib import Path

from flinklike_spark.config import CheckpointingOptions, CheckpointStorageType
from flinklike_spark.errors import ConfigurationError

__all__ = ["SAVEPOINT_NEEDS_DIRECTORY", "JobCheckpointStorage", "resolve_checkpoint_storage"]

log = logging.getLogger(__name__)

#: Why a savepoint request fails when the job's checkpoints outlive it nowhere.
SAVEPOINT_NEEDS_DIRECTORY = (
    "savepoints need a directory that outlives the job: set execution.checkpointing.dir (any fsspec URL, "
    "e.g. file:///tmp/checkpoints); this job keeps its checkpoints only while it runs (jobmanager checkpoint "
    "storage; Flink's execution.checkpointing.savepoint-dir is not supported: savepoints go to the dir)"
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobCheckpointStorage:
    """The checkpointing options a job runs with, and its job-lifetime directory if it has one.

    Attributes:
        options: the options with ``directory`` set whenever the job checkpoints.
        temporary_dir: the local directory created for ``jobmanager`` storage (None for
            ``filesystem``); :meth:`discard` deletes it.
    """

    options: CheckpointingOptions
    temporary_dir: str | None = None

    @property
    def outlives_job(self) -> bool:
        """Whether the checkpoints stay after the job ends (savepoints need that)."""
        return self.temporary_dir is None and self.options.directory is not None

    def discard(self) -> None:
        """Delete the job-lifetime directory (idempotent; nothing for ``filesystem`` storage)."""
        if self.temporary_dir is not None:
            shutil.rmtree(self.temporary_dir, ignore_errors=True)


def resolve_checkpoint_storage(options: CheckpointingOptions, job_id: str) -> JobCheckpointStorage:
    """The storage of ``job_id``'s checkpoints; creates the job-lifetime directory of ``jobmanager`` storage.

    Raises:
        ConfigurationError: ``filesystem`` storage without ``execution.checkpointing.dir``, or
            ``jobmanager`` storage with it (one of the two settings is a mistake).
    """
    kind = options.storage
    if kind is None:
        kind = CheckpointStorageType.FILESYSTEM if options.directory is not None else CheckpointStorageType.JOBMANAGER
    if kind is CheckpointStorageType.FILESYSTEM:
        if options.directory is None:
            raise ConfigurationError(
                "execution.checkpointing.storage is 'filesystem' but execution.checkpointing.dir is not set; set "
                "the dir (any fsspec URL, e.g. file:///tmp/checkpoints) or use storage 'jobmanager' (checkpoints "
                "that live as long as the job)"
            )
        return JobCheckpointStorage(options=options)
    if options.directory is not None:
        raise ConfigurationError(
            f"execution.checkpointing.storage is 'jobmanager' (checkpoints that live as long as the job) but "
            f"execution.checkpointing.dir is set to {options.directory!r}; unset one of the two (storage "
            f"'filesystem' keeps checkpoints in the dir)"
        )
    if options.interval is None:
        return JobCheckpointStorage(options=options)  # no checkpoints: nothing to keep
    directory = tempfile.mkdtemp(prefix=f"flinklike-checkpoints-{job_id[:12]}-")
    log.warning(
        "job %s: checkpoints are kept in %s only while the job runs (jobmanager checkpoint storage): failover "
        "restores from them, but the job cannot be resumed after it ends and savepoints are refused; set "
        "execution.checkpointing.dir to keep them",
        job_id, directory,
    )  # fmt: skip
    return JobCheckpointStorage(
        options=dataclasses.replace(options, directory=Path(directory).as_uri()), temporary_dir=directory
    )
