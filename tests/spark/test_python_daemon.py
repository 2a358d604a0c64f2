"""Spark's Python workers fork from flinklike_spark.spark.python_daemon, with the project imported.

The probe is defined inside the test, so that cloudpickle ships it by value and
the worker imports nothing for it.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_python_workers_fork_from_the_daemon_that_imported_the_project(spark):
    from flinklike_spark.spark.python_daemon import PRELOADED

    def _probe(_):
        import os
        import sys

        with open(f"/proc/{os.getppid()}/cmdline", "rb") as cmdline:
            parent = cmdline.read().replace(b"\0", b" ").decode()
        preloaded = ("flinklike_spark.spark.source", "flinklike_spark.spark.writer",
                     "flinklike_spark.spark.foreach_batch")  # fmt: skip
        return [(parent, [m for m in preloaded if m not in sys.modules])]

    assert spark.conf.get("spark.python.daemon.module") == "flinklike_spark.spark.python_daemon"
    [(parent, missing)] = spark.sparkContext.parallelize([0], 1).flatMap(_probe).collect()
    assert "-m flinklike_spark.spark.python_daemon" in parent, parent
    assert missing == [], f"the worker had to import {missing} itself"
    assert len(PRELOADED) == 3  # the probe's list is a copy of it
