"""execution.checkpointing.storage: which storage a job's checkpoints get (jobmanager / filesystem)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from flinklike_spark._runtime.jobmaster.checkpoint_storage import resolve_checkpoint_storage
from flinklike_spark.config import CheckpointStorageType, Configuration
from flinklike_spark.errors import ConfigurationError


def _options(**values):
    return Configuration(values).checkpointing


def test_an_interval_without_a_directory_gets_a_job_lifetime_directory(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    storage = resolve_checkpoint_storage(_options(**{"execution.checkpointing.interval": "1 s"}), "job-1")
    assert storage.temporary_dir is not None and Path(storage.temporary_dir).parent == tmp_path
    assert storage.options.directory == Path(storage.temporary_dir).as_uri()
    assert not storage.outlives_job
    storage.discard()
    assert list(tmp_path.iterdir()) == []
    storage.discard()  # idempotent


def test_the_directory_means_filesystem_storage_and_outlives_the_job(tmp_path):
    options = _options(**{"execution.checkpointing.interval": "1 s", "execution.checkpointing.dir": str(tmp_path)})
    storage = resolve_checkpoint_storage(options, "job-1")
    assert storage.temporary_dir is None and storage.options is options and storage.outlives_job
    storage.discard()
    assert tmp_path.exists()


def test_no_interval_no_directory_creates_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    storage = resolve_checkpoint_storage(_options(), "job-1")
    assert storage.temporary_dir is None and storage.options.directory is None
    assert list(tmp_path.iterdir()) == []


def test_the_storage_key_parses_flinks_values():
    assert _options(**{"execution.checkpointing.storage": "jobmanager"}).storage is CheckpointStorageType.JOBMANAGER
    assert _options(**{"execution.checkpointing.storage": "filesystem"}).storage is CheckpointStorageType.FILESYSTEM
    with pytest.raises(ConfigurationError, match="valid values: jobmanager, filesystem"):
        _options(**{"execution.checkpointing.storage": "rocks"})


def test_filesystem_storage_needs_the_directory():
    options = _options(**{"execution.checkpointing.interval": "1 s", "execution.checkpointing.storage": "filesystem"})
    with pytest.raises(ConfigurationError, match="'filesystem' but execution.checkpointing.dir is not set"):
        resolve_checkpoint_storage(options, "job-1")


def test_jobmanager_storage_with_a_directory_is_refused(tmp_path):
    options = _options(**{
        "execution.checkpointing.interval": "1 s",
        "execution.checkpointing.storage": "jobmanager",
        "execution.checkpointing.dir": str(tmp_path),
    })  # fmt: skip
    with pytest.raises(ConfigurationError, match="'jobmanager' .* but execution.checkpointing.dir is set"):
        resolve_checkpoint_storage(options, "job-1")


def test_the_rest_checkpoint_config_names_the_storage(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from flinklike_spark._runtime.rest.job_views import checkpoint_config

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for values, name, kept in [
        ({"execution.checkpointing.interval": "1 s"}, "JobManagerCheckpointStorage", False),
        ({"execution.checkpointing.interval": "1 s", "execution.checkpointing.dir": str(tmp_path)},
         "DeltaCheckpointStorage", True),
    ]:  # fmt: skip
        config = Configuration(values)
        storage = resolve_checkpoint_storage(config.checkpointing, "job-1")
        view = checkpoint_config(SimpleNamespace(checkpoints=object(), checkpoint_storage=storage), config)
        assert view["checkpoint_storage"].startswith(name) and view["externalization"]["enabled"] is kept
        storage.discard()
