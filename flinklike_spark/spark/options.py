"""Spark data source options, parsed once into typed objects at the edge.

Spark lower-cases option keys and passes every value as a string. Options of
the bridge itself (``pipeline``, ``maxCheckpointsPerTrigger``, ``queryId``,
``path``) are matched case-insensitively; every other key must be a Flink
configuration key (case folded with :func:`flinklike_spark.config.fold_key_case`)
and is validated by :class:`~flinklike_spark.config.Configuration`, whose
error names the valid keys.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

from flinklike_spark.config import PATTERN_OPTIONS, Configuration, fold_key_case
from flinklike_spark.errors import ConfigurationError
from flinklike_spark.storage import StorageConfig

__all__ = ["ReadOptions", "WriteOptions"]

_DIR_KEY = "execution.checkpointing.dir"
#: Without checkpoints nothing is ever committed for Spark; Flink's default is "disabled".
DEFAULT_CHECKPOINT_INTERVAL = "1 s"
# Options Spark itself adds to a source's or sink's options (not the user's).
_SPARK_OWNED = frozenset({"checkpointlocation", "queryname"})


def _split(options: Mapping[str, str], own: frozenset[str]) -> tuple[dict[str, str], dict[str, Any]]:
    """(bridge options by lower-case key, Flink configuration keys) from raw Spark options."""
    bridge, flink = {}, {}
    for key, value in options.items():
        lower = key.lower()
        if lower in own:
            bridge[lower] = value
        elif lower not in _SPARK_OWNED:
            flink[key] = value
    return bridge, fold_key_case(flink)


def _directory(bridge: Mapping[str, str], flink: dict[str, Any], what: str) -> str:
    path, configured = bridge.get("path"), flink.get(_DIR_KEY)
    if path and configured and os.path.abspath(path) != os.path.abspath(configured):
        raise ConfigurationError(
            f"{what}: load()/save() path {path!r} and option {_DIR_KEY}={configured!r} differ; give one of them"
        )
    directory = path or configured
    if not directory:
        raise ConfigurationError(
            f"{what}: no job directory; set option {_DIR_KEY!r} (or pass it as the path) to the directory that "
            f"holds the job's checkpoints and its input/output tables"
        )
    return str(directory)


def _config(flink: dict[str, Any], directory: str, what: str) -> tuple[dict[str, Any], Configuration]:
    values = {"execution.checkpointing.interval": DEFAULT_CHECKPOINT_INTERVAL} | flink | {_DIR_KEY: directory}
    try:
        return values, Configuration(values)
    except ConfigurationError as exc:
        raise ConfigurationError(
            f"{what}: {exc} (the bridge's own options: {', '.join(sorted(_READ_OWN | _WRITE_OWN))})"
        ) from None


_READ_OWN = frozenset({"pipeline", "pipeline.args", "maxcheckpointspertrigger", "path"})
_WRITE_OWN = frozenset({"pipeline", "pipeline.args", "queryid", "path"})


def _pipeline_args(bridge: Mapping[str, str], what: str) -> dict[str, Any]:
    """The ``pipeline.args`` option: a JSON object whose entries the pipeline function gets as keyword arguments."""
    text = bridge.get("pipeline.args")
    if text is None:
        return {}
    if not bridge.get("pipeline"):
        raise ConfigurationError(
            f"{what}: option pipeline.args is given without option pipeline (the function it is for)"
        )
    try:
        args = json.loads(text)
    except ValueError as exc:
        raise ConfigurationError(
            f"{what}: option pipeline.args={text!r} is not JSON ({exc}); give a JSON object, e.g. "
            f'json.dumps({{"threshold": 500}}), whose entries the pipeline function gets as keyword arguments'
        ) from None
    if not isinstance(args, dict):
        raise ConfigurationError(
            f"{what}: option pipeline.args={text!r} is a JSON {type(args).__name__}; give a JSON object (its entries "
            f"are the pipeline function's keyword arguments)"
        )
    return args


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReadOptions:
    """Options of ``spark.readStream.format("flinklike")``.

    Attributes:
        pipeline: ``module:function`` building the job; None reads the output of the job
            that a ``df.writeStream.format("flinklike").option("pipeline", ...)`` query on
            the same directory runs (this query then starts no job; Spark needs ``.schema(...)``).
        pipeline_args: option ``pipeline.args`` (a JSON object): the keyword arguments of
            the pipeline function, ``function(env, **pipeline_args)``.
        directory: ``execution.checkpointing.dir`` (checkpoints, ``output`` table, runner record).
        config: the job's Flink configuration (checkpoint interval 1 s unless set).
        flink_options: the same as given (strings, Flink's key spelling), to hand to the runner.
        max_checkpoints_per_trigger: admission control: at most this many
            checkpoints' output per micro-batch (None: everything committed).
    """

    pipeline: str | None
    directory: str
    config: Configuration
    flink_options: Mapping[str, Any]
    max_checkpoints_per_trigger: int | None
    pipeline_args: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @staticmethod
    def parse(options: Mapping[str, str]) -> ReadOptions:
        what = 'spark.readStream.format("flinklike")'
        bridge, flink = _split(options, _READ_OWN)
        pipeline = bridge.get("pipeline") or None  # None: read a job that a writeStream query runs
        directory = _directory(bridge, flink, what)
        limit = bridge.get("maxcheckpointspertrigger")
        if limit is not None:
            try:
                limit = int(limit)
            except ValueError:
                limit = 0
            if limit < 1:
                raise ConfigurationError(
                    f"{what}: maxCheckpointsPerTrigger must be a positive integer, got {bridge['maxcheckpointspertrigger']!r}"
                )
        flink_options, config = _config(flink, directory, what)
        return ReadOptions(
            pipeline=pipeline,
            directory=directory,
            config=config,
            flink_options=flink_options,
            max_checkpoints_per_trigger=limit,
            pipeline_args=_pipeline_args(bridge, what),
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class WriteOptions:
    """Options of ``df.writeStream.format("flinklike")``.

    Attributes:
        directory: the job's directory; micro-batches go to its ``input`` table.
        query_id: names the writing query in the app transaction ``spark/<query_id>``;
            give each query that feeds the same job its own (default ``default``),
            and a new one when a query starts over with a new checkpointLocation
            (its batch ids start again at 0).
        checkpoint_location: the query's ``checkpointLocation`` option when Spark
            passes it; recorded with each commit, so that a query that reuses a
            queryId with another checkpointLocation is refused instead of having
            its micro-batches taken for replays.
        pipeline: ``module:function`` (``function(env, stream)``) building the engine job
            that consumes the micro-batches; None: the user runs the job.
        pipeline_args: option ``pipeline.args`` (a JSON object): the keyword arguments of
            the pipeline function, ``function(env, stream, **pipeline_args)``.
        config: with ``pipeline``, the job's Flink configuration (checkpoint interval 1 s unless set).
        flink_options: with ``pipeline``, the Flink keys as given, to hand to the runner.
    """

    directory: str
    query_id: str
    checkpoint_location: str | None = None
    storage: StorageConfig = dataclasses.field(default_factory=StorageConfig)
    pipeline: str | None = None
    config: Configuration | None = None
    flink_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    pipeline_args: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @staticmethod
    def parse(options: Mapping[str, str]) -> WriteOptions:
        what = 'df.writeStream.format("flinklike")'
        bridge, flink = _split(options, _WRITE_OWN)
        directory = _directory(bridge, flink, what)
        location = next((v for k, v in options.items() if k.lower() == "checkpointlocation"), None)
        pipeline = bridge.get("pipeline")
        if pipeline:  # the job runs with the query: every Flink key is the job's configuration
            flink_options, config = _config(flink, directory, what)
            return WriteOptions(
                directory=directory,
                query_id=bridge.get("queryid") or "default",
                checkpoint_location=location or None,
                storage=config.storage,
                pipeline=pipeline,
                config=config,
                flink_options=flink_options,
                pipeline_args=_pipeline_args(bridge, what),
            )
        _pipeline_args(bridge, what)  # refuses pipeline.args without pipeline
        flink.pop(_DIR_KEY, None)
        storage_keys = {key: value for key, value in flink.items() if _is_storage_key(key)}
        unknown = sorted(set(flink) - set(storage_keys))
        if unknown:
            raise ConfigurationError(
                f"{what}: unknown options {unknown}; valid: {_DIR_KEY}, {', '.join(sorted(_WRITE_OWN))}, "
                f"and the storage keys (s3.*, {', '.join(sorted(PATTERN_OPTIONS))}); Flink configuration keys "
                f"are options of a query that runs its job (option 'pipeline')"
            )
        storage = Configuration(storage_keys).storage
        return WriteOptions(
            directory=directory,
            query_id=bridge.get("queryid") or "default",
            checkpoint_location=location or None,
            storage=storage,
        )


def _is_storage_key(key: str) -> bool:
    return key.startswith("s3.") or any(pattern.match(key) for pattern in PATTERN_OPTIONS.values())
