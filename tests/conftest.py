"""Suite-wide wiring: which tests share a pytest-xdist worker (``--dist loadgroup``, set in pyproject's addopts).

The suite runs in parallel (``-n``); a test's ``xdist_group`` decides which
tests must run one after the other on one worker. It is given here, from the
test's directory, fixtures and markers, so that a new test falls into its group without
marking it (docs/architecture.md, "Test suite in parallel"):

* ``spark``: every test that uses the ``spark`` fixture, the suite's one
  session-scoped SparkSession (a JVM per worker otherwise: 20 s or more to start).
* ``sparkcluster`` (``tests/sparkcluster/``): the session-scoped standalone
  Spark cluster. A Spark test that starts its own JVM in a subprocess (an
  example, a documentation block, ``spark-submit``) is in no Spark group: it
  runs beside the others like any slow test.
* ``objectstore`` (``tests/objectstore/``): session-scoped servers (moto and
  Azurite) started once. The Kafka tests (``tests/kafka/``) are not one group:
  their modules spread over the workers like other slow modules, and a worker
  starts a broker (about 4 s, 2 CPU-s) when it enters them and stops it when it
  leaves (tests/kafka/conftest.py), which is cheaper than running a quarter of
  the suite's slow tests on one worker.
* every other ``slow`` test (multi-process: a MiniCluster with TaskExecutor
  processes) is grouped with its module, so a module's module-scoped job or
  cluster fixture is built once and a module's tests do not run against each
  other; modules still run side by side.
* the rest (unit tests, and the slow modules in ``INDEPENDENT_MODULES``) is
  spread one test at a time.

A test that sets ``@pytest.mark.xdist_group`` itself keeps its own group.

pytest-xdist 3.8 groups by appending ``@group`` to ``item._nodeid``, which
pytest 9.2 no longer reads (a node id is ``item._id`` there), so its
``loadgroup`` would silently spread every group. Here each worker writes its
items' groups to a file in a directory the controller hands it
(``workerinput``), and the controller's scheduler (``--dist loadgroup``'s, with
its scope taken from that file) keeps each group on one worker.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import threading
from pathlib import Path

import pytest

from flinklike_spark._runtime.cluster.process_main import STACK_DUMP_DIR_ENV, stack_dump_path

TESTS = Path(__file__).resolve().parent

# Every JVM the suite starts (Spark drivers and executors, the standalone cluster, PyFlink, the Kafka broker)
# lives seconds to minutes, and a run on 2 cores is bound by CPU: compiling with C1 only (no C2) costs a
# third less CPU for the same Spark test, and Spark's JVMs map their classes from a class-data-sharing
# archive (tests/support/jvm_class_archive.py: half the CPU of a session's start) once a first run wrote
# it (docs/benchmarks.md, "Test suite time"). A JAVA_TOOL_OPTIONS of the caller's own is kept (the xdist
# workers inherit the controller's).
if "JAVA_TOOL_OPTIONS" not in os.environ:
    from tests.support.jvm_class_archive import java_tool_options

    archive_options = java_tool_options(Path.home() / ".cache" / "flinklike")
    os.environ["JAVA_TOOL_OPTIONS"] = f"-XX:TieredStopAtLevel=1 {archive_options}".strip()

# A test that times out gets the Python stacks of its TaskExecutors in its report (a hang inside a
# TaskExecutor shows nowhere else): on SIGUSR1 each writes them to this directory
# (flinklike_spark._runtime.cluster.process_main); xdist workers inherit the controller's.
_STACK_DIR_CREATED = None
if STACK_DUMP_DIR_ENV not in os.environ:
    _STACK_DIR_CREATED = os.environ[STACK_DUMP_DIR_ENV] = tempfile.mkdtemp(prefix="taskexecutor-stacks-")

#: Directory under tests/ -> the xdist group of every test in it.
DIRECTORY_GROUPS = {"sparkcluster": "sparkcluster", "objectstore": "objectstore"}
#: Slow modules whose tests are independent of each other (each runs its own subprocess or job in its own
#: directory, with no module-scoped fixture): spread one test at a time like unit tests, not kept on one
#: worker (the PyFlink programs alone are minutes of real PyFlink JVMs, one after another otherwise).
INDEPENDENT_MODULES = frozenset(
    {
        "compat/test_pyflink_programs.py",
        "compat/test_pyflink_examples.py",
        "integration/test_docs_blocks.py",
    }
)
#: Session-scoped fixture -> the group of every test that uses it, outside those directories.
FIXTURE_GROUPS = {"spark": "spark"}


@pytest.fixture(scope="session")
def spark():
    """The suite's one real local Spark session with Delta Lake, for ``spark``-marked tests anywhere.

    Built with :func:`flinklike_spark.spark.session`, as a user builds it: Delta
    configured from the pinned jar, the ``flinklike`` data source registered,
    ``PYSPARK_PYTHON`` set to this interpreter. Spark takes 20 s or more to start,
    so every Spark test shares this one session (they all run on one xdist worker: the ``spark`` group).
    """
    from flinklike_spark.spark import session

    spark = session("flinklike-spark-tests", config={"spark.ui.enabled": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    yield spark
    for query in spark.streams.active:
        query.stop()
    spark.stop()


@pytest.fixture(autouse=True)
def _preexisting_task_executors(request: pytest.FixtureRequest) -> None:
    """Slow tests: note the TaskExecutor processes that are not the test's (tests/support/failover_jobs.py)."""
    if request.node.get_closest_marker("slow") is not None:
        from tests.support.failover_jobs import note_preexisting_task_executors

        note_preexisting_task_executors()


def xdist_group_of(item: pytest.Item) -> str | None:
    """The group ``item`` runs in (None: scheduled on its own)."""
    path = Path(str(item.path)).resolve()
    try:
        top = path.relative_to(TESTS).parts[0]
    except (ValueError, IndexError):
        return None
    if top in DIRECTORY_GROUPS:
        return DIRECTORY_GROUPS[top]
    for fixture, group in FIXTURE_GROUPS.items():
        if fixture in getattr(item, "fixturenames", ()):
            return group
    module = path.relative_to(TESTS).as_posix()
    if item.get_closest_marker("slow") is not None and module not in INDEPENDENT_MODULES:
        return "module:" + module
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    groups = {}
    for item in items:
        marker = item.get_closest_marker("xdist_group")
        if marker is None:
            group = xdist_group_of(item)
            if group is not None:
                item.add_marker(pytest.mark.xdist_group(group))
        else:
            group = str(marker.args[0] if marker.args else marker.kwargs.get("name", "default"))
        if group is not None:
            groups[item.nodeid] = group
    directory = getattr(config, "workerinput", {}).get(_GROUPS_DIR)
    if directory is not None:  # an xdist worker: tell the controller's scheduler
        path = Path(directory) / f"{config.workerinput['workerid']}.json"
        path.with_suffix(".tmp").write_text(json.dumps(groups))
        path.with_suffix(".tmp").replace(path)


_GROUPS_DIR = "flinklike_xdist_groups_dir"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """Controller: give each worker the directory to write its items' groups to."""
    config = node.config
    if not hasattr(config, "_flinklike_groups_dir"):
        config._flinklike_groups_dir = tempfile.mkdtemp(prefix="xdist-groups-")
    node.workerinput[_GROUPS_DIR] = config._flinklike_groups_dir


def pytest_unconfigure(config: pytest.Config) -> None:
    directory = getattr(config, "_flinklike_groups_dir", None)
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)
    if _STACK_DIR_CREATED is not None:
        shutil.rmtree(_STACK_DIR_CREATED, ignore_errors=True)


def _task_executor_stacks() -> list[tuple[int, str]]:
    """The threads of every TaskExecutor under this process (SIGUSR1: each writes them to its dump file)."""
    import signal
    import time

    from tests.support.processes import task_executors_under

    executors = task_executors_under(os.getpid())
    for process in executors:
        with contextlib.suppress(OSError):
            os.kill(process.pid, signal.SIGUSR1)
    time.sleep(1.0)  # faulthandler writes from the signal handler at once; give each a moment
    stacks = []
    for process in executors:
        with contextlib.suppress(OSError):
            if text := Path(stack_dump_path(os.environ[STACK_DUMP_DIR_ENV], process.pid)).read_text():
                stacks.append((process.pid, text))
    return stacks


#: seconds before a test's timeout when its TaskExecutors' stacks are taken: once pytest-timeout fails the
#: test, its ``with`` blocks unwind and stop the cluster before a report hook could ask them
_STACKS_BEFORE_TIMEOUT_S = 3.0


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings) -> None:
    """Beside pytest-timeout's timer (this returns None, so it still sets its own): one that takes the stacks of
    the test's TaskExecutors just before the timeout, for the report of a test that hangs."""
    timeout = getattr(settings, "timeout", None)
    if not timeout or timeout <= 2 * _STACKS_BEFORE_TIMEOUT_S:
        return None

    def take() -> None:
        item._flinklike_stacks = _task_executor_stacks()

    timer = threading.Timer(timeout - _STACKS_BEFORE_TIMEOUT_S, take)
    timer.daemon = True
    timer.start()
    item._flinklike_stack_timer = timer
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_cancel_timer(item: pytest.Item) -> None:
    timer = getattr(item, "_flinklike_stack_timer", None)
    if timer is not None:
        timer.cancel()
    return None  # pytest-timeout cancels its own


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A phase that timed out (pytest-timeout) reports the stacks of the test's TaskExecutors, taken just
    before the timeout (or now, if none were taken then)."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed or call.excinfo is None or not str(call.excinfo.value).startswith("Timeout"):
        return
    stacks = getattr(item, "_flinklike_stacks", None) or _task_executor_stacks()
    for pid, text in stacks:
        report.sections.append((f"TaskExecutor {pid}: its threads just before the test timed out", text))


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadgroup``: xdist's LoadGroupScheduling with each test's group read from the workers' files."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class FileGroupScheduling(LoadGroupScheduling):
        _groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None:
                directory = getattr(config, "_flinklike_groups_dir", None)
                files = sorted(Path(directory).glob("*.json")) if directory else []
                self._groups = json.loads(files[0].read_text()) if files else {}
            group = self._groups.get(nodeid)
            return f"group:{group}" if group is not None else super()._split_scope(nodeid)

    return FileGroupScheduling(config, log)
