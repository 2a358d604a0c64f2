"""Spark's Python worker daemon, with this project's modules imported before it forks workers.

Spark starts one ``pyspark.daemon`` per executor (and per local session) and
forks a Python worker from it for each task; every worker that runs the
``flinklike`` data source, its writer or a ``foreachBatch`` helper then imports
pyarrow, deltalake and this project again (about half a second of CPU each).
:func:`flinklike_spark.spark.session` sets ``spark.python.daemon.module`` to this
module for local masters (unless the configuration names one; on a cluster an
executor's Python without the project would fail here, before the project's own
error naming the fix), which imports those modules once
and then runs PySpark's own daemon: every forked worker starts with them
imported. Nothing else changes: the daemon, its protocol and worker reuse are
PySpark's, and a module that cannot be imported here only costs the workers
their head start (they import it, and fail with its error, themselves).
"""

from __future__ import annotations

import importlib
import sys

from pyspark import daemon

__all__ = ["PRELOADED"]

PRELOADED = ("flinklike_spark.spark.source", "flinklike_spark.spark.writer", "flinklike_spark.spark.foreach_batch")
"""What the forked workers of the ``flinklike`` source, sink and foreachBatch helpers import."""


def _preload() -> None:
    for module in PRELOADED:
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - a worker that needs it fails with the real error itself
            print(f"flinklike_spark.spark.python_daemon: cannot preload {module}: {exc!r}", file=sys.stderr)


if __name__ == "__main__":
    _preload()
    daemon.manager()
