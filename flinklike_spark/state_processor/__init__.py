"""The State Processor API: keyed state as data (Flink's ``org.apache.flink.state.api``).

Read a checkpoint's or savepoint's state as tables, and write new savepoints
from tables: bootstrap a job's state from historical data, delete keys, repair
values, change the shape of a state between job versions. Tables are
``pyarrow.Table``s, or Spark DataFrames with a SparkSession. See
docs/state-processor.md for the recipes.

* :class:`SavepointReader` - ``read_keyed_state``, ``read_timers``,
  ``read_broadcast_state``, ``read_operator_state``.
* :class:`SavepointWriter` - ``new_savepoint`` / ``from_existing_savepoint``,
  ``with_operator``, ``remove_operator``, ``drop_state``, ``with_max_parallelism``,
  ``write``. Replacing an operator's state never loses a keyed state silently: each
  one the source holds is written or dropped with ``drop_state``.
* :class:`OperatorTransformation` - ``bootstrap_with(data).key_by(...)`` then
  ``.states(*descriptors)`` (one column per state) or
  ``.transform(KeyedStateBootstrapFunction)``.
"""

from __future__ import annotations

from .identifier import OperatorIdentifier
from .reader import SavepointReader
from .transformation import (
    KeyedOperatorTransformation,
    KeyedStateBootstrapFunction,
    OneInputOperatorTransformation,
    OperatorTransformation,
    StateBootstrapTransformation,
)
from .writer import SavepointWriter

__all__ = [
    "KeyedOperatorTransformation",
    "KeyedStateBootstrapFunction",
    "OneInputOperatorTransformation",
    "OperatorIdentifier",
    "OperatorTransformation",
    "SavepointReader",
    "SavepointWriter",
    "StateBootstrapTransformation",
]
