"""The configuration file: Flink's ``config.yaml`` in ``$FLINK_CONF_DIR``.

As in Flink 2.x (``GlobalConfiguration.loadConfiguration``), a program's
environment starts from the values of ``config.yaml`` in the directory named
by the ``FLINK_CONF_DIR`` environment variable, and the program's own values
override them. The file is standard YAML; nested mappings are keys joined by
dots, so these two are the same::

    parallelism.default: 2
    execution.checkpointing.interval: 10s

    parallelism:
      default: 2
    execution:
      checkpointing:
        interval: 10s

A Flink cluster's ``config.yaml`` holds keys for parts of Flink this engine
does not have (``jobmanager.memory.process.size``, ...): keys that are not
options here are skipped and logged once, so the same file serves both. A
known key with a bad value fails with the file named.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flinklike_spark.config import DEPRECATED_KEYS, OPTIONS, Configuration
from flinklike_spark.config_options import is_pattern_key
from flinklike_spark.errors import ConfigurationError

__all__ = ["CONFIG_FILE", "CONF_DIR_ENV", "load_configuration"]

CONF_DIR_ENV = "FLINK_CONF_DIR"
CONFIG_FILE = "config.yaml"

_log = logging.getLogger(__name__)


def load_configuration(conf_dir: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The option values of ``<conf_dir>/config.yaml`` (``conf_dir`` defaults to ``$FLINK_CONF_DIR``).

    Returns ``{}`` when no directory is given or set. Keys that are not
    options of this engine are left out (logged at INFO).

    Raises:
        ConfigurationError: the directory or its ``config.yaml`` is missing,
            the file is not YAML or not a mapping, or a known key's value is
            invalid; the message names the file.
    """
    if conf_dir is None:
        conf_dir = os.environ.get(CONF_DIR_ENV) or None
        if conf_dir is None:
            return {}
    path = Path(conf_dir) / CONFIG_FILE
    if not path.is_file():
        raise ConfigurationError(
            f"{CONF_DIR_ENV}={os.fspath(conf_dir)!r} has no {CONFIG_FILE} ({path} is missing); "
            f"point {CONF_DIR_ENV} at a directory with a {CONFIG_FILE}, or unset it"
        )
    import yaml

    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"{path} is not valid YAML: {exc}") from exc
    if document is None:
        return {}
    if not isinstance(document, Mapping):
        raise ConfigurationError(
            f"{path} must be a mapping of configuration keys to values, got a {type(document).__name__}"
        )
    flat = _flatten(document, path)
    known = {k: v for k, v in flat.items() if k in OPTIONS or k in DEPRECATED_KEYS or is_pattern_key(k)}
    skipped = sorted(set(flat) - set(known))
    if skipped:
        _log.info("%s: skipping %d key(s) that are not options of flinklike-spark: %s", path, len(skipped),
                  ", ".join(skipped))  # fmt: skip
    try:
        Configuration(known)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{path}: {exc}") from exc
    return known


def _flatten(document: Mapping[Any, Any], path: Path) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for name, value in _entries(document, path, ""):
        if name in flat:
            raise ConfigurationError(f"{path}: key {name!r} is given twice (nested and with dots)")
        flat[name] = value
    return flat


def _entries(document: Mapping[Any, Any], path: Path, prefix: str):
    for key, value in document.items():
        if not isinstance(key, str):
            raise ConfigurationError(
                f"{path}: configuration keys must be strings, got {type(key).__name__} {key!r} (quote it)"
            )
        if isinstance(value, Mapping):
            yield from _entries(value, path, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value
