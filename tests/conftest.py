"""Suite-wide wiring: which tests share a pytest-xdist worker (``--dist loadgroup``, set in pyproject's addopts).

The suite runs in parallel (``-n``); a test's ``xdist_group`` decides which
tests must run one after the other on one worker. It is given here, from the
test's directory and markers, so that a new test falls into its group without
marking it (docs/architecture.md, "Test suite in parallel"):

* ``spark``: everything under ``tests/spark/`` and ``tests/sparkcluster/`` and
  every ``spark``-marked test. They share one session-scoped SparkSession (one
  JVM per worker otherwise) and the standalone cluster, and two Spark JVMs at
  once starve each other on 2 cores.
* ``objectstore`` (``tests/objectstore/``) and ``kafka`` (``tests/kafka/``):
  session-scoped servers (moto and Azurite, a Kafka broker) started once.
* every other ``slow`` test (multi-process: a MiniCluster with TaskExecutor
  processes) is grouped with its module, so a module's module-scoped job or
  cluster fixture is built once and a module's tests do not run against each
  other; modules still run side by side.
* the rest (unit tests) is spread one test at a time.

A test that sets ``@pytest.mark.xdist_group`` itself keeps its own group.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

#: Directory under tests/ -> the xdist group of every test in it.
DIRECTORY_GROUPS = {"spark": "spark", "sparkcluster": "spark", "objectstore": "objectstore", "kafka": "kafka"}
#: Marker -> group, for tests outside those directories.
MARKER_GROUPS = {"spark": "spark"}


def xdist_group_of(item: pytest.Item) -> str | None:
    """The group ``item`` runs in (None: scheduled on its own)."""
    path = Path(str(item.path)).resolve()
    try:
        top = path.relative_to(TESTS).parts[0]
    except (ValueError, IndexError):
        return None
    if top in DIRECTORY_GROUPS:
        return DIRECTORY_GROUPS[top]
    for marker, group in MARKER_GROUPS.items():
        if item.get_closest_marker(marker) is not None:
            return group
    if item.get_closest_marker("slow") is not None:
        return "module:" + path.relative_to(TESTS).as_posix()
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the markers into the node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            group = xdist_group_of(item)
            if group is not None:
                item.add_marker(pytest.mark.xdist_group(group))
