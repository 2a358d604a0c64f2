"""Helpers of the checkpointing integration tests: mode configurations, stopping a job mid-way."""

from __future__ import annotations

import time

import pytest

from checkpointing import list_completed_checkpoints
from flinklike_spark import StreamExecutionEnvironment
from flinklike_spark.errors import JobCancelledError

__all__ = [
    "MODES",
    "checkpoint_config",
    "run_and_cancel",
]

MODES = ("aligned", "unaligned", "aligned-with-timeout")


def checkpoint_config(directory: str, mode: str, parallelism: int = 2) -> dict:
    """Two TaskExecutors, checkpoints every 500 ms into ``directory`` in ``mode`` (one of MODES)."""
    if mode not in MODES:
        raise ValueError(f"unknown checkpointing mode {mode!r}; valid: {MODES}")
    config = {
        "parallelism.default": parallelism,
        "local.number-taskmanager": 2,
        "execution.checkpointing.interval": "500ms",
        "execution.checkpointing.dir": directory,
        "execution.checkpointing.num-retained": 3,
        # small buffers: more of them in flight, so unaligned checkpoints have channel state
        "taskmanager.memory.segment-size": "2kb",
    }
    if mode in ("unaligned", "aligned-with-timeout"):
        config["execution.checkpointing.unaligned.enabled"] = True
    if mode == "aligned-with-timeout":
        config["execution.checkpointing.aligned-checkpoint-timeout"] = "5ms"
    return config


def run_and_cancel(env: StreamExecutionEnvironment, directory: str, *, checkpoints: int) -> str:
    """Start the job, cancel it once ``checkpoints`` checkpoints completed; return its job id."""
    client = env.execute_async("resume me")
    deadline = time.monotonic() + 120
    while True:
        assert not client.done(), "the job ended before it was stopped"
        completed = list_completed_checkpoints(directory, client.job_id)
        if len(completed) >= checkpoints:
            break
        assert time.monotonic() < deadline, f"only {len(completed)} checkpoints completed"
        time.sleep(0.1)
    client.cancel()
    with pytest.raises(JobCancelledError):
        client.wait(60)
    return client.job_id
