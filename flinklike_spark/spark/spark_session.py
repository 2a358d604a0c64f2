"""A SparkSession with Delta Lake and the ``flinklike`` data source, checked before Spark starts.

:func:`session` is the one call a user needs; :func:`register` adds the data
source to a session the user built (e.g. under ``spark-submit``). Both fail
early with :class:`SparkSetupError` naming what to fix: a missing Java, a
``PYSPARK_PYTHON`` that cannot import the project, a Delta jar Spark cannot
resolve.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flinklike_spark.errors import FlinklikeError
from flinklike_spark.spark.connect_sessions import is_connect_session
from flinklike_spark.spark.packages import package_jars

__all__ = [
    "DELTA_SPARK_PACKAGE",
    "IVY_SETTINGS",
    "SparkSetupError",
    "check_python",
    "is_connect_session",
    "register",
    "session",
]

#: The newest delta-spark jar built for Spark 4.2 on Maven Central. The delta-spark
#: 4.4.1 wheel asks for a 4.4.1 jar that Maven Central does not serve (2026-11-23).
DELTA_SPARK_PACKAGE = "io.delta:delta-spark_4.2_2.13:4.4.0"

#: Ivy settings resolving the Spark packages from Maven Central only (``spark.jars.ivySettings``).
IVY_SETTINGS = str(Path(__file__).resolve().with_name("ivysettings.xml"))

_PROJECT_ROOT = str(Path(__file__).resolve().parents[2])
_PROBE = "import flinklike_spark, connectors, checkpointing, pyarrow, deltalake"


class SparkSetupError(FlinklikeError, RuntimeError):
    """Spark cannot run the bridge in this environment; the message says what to install or set."""


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    candidates = [str(Path(home) / "bin" / "java")] if home else []
    candidates.append(shutil.which("java") or "")
    for java in candidates:
        if java and os.access(java, os.X_OK):
            return java
    raise SparkSetupError(
        "Spark needs Java 17 and none was found (no java on PATH"
        + (f", nor {home}/bin/java from JAVA_HOME" if home else ", JAVA_HOME unset")
        + "); install a JDK or JRE 17 (e.g. apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
    )


def _worker_pythonpath() -> str:
    """PYTHONPATH for Spark's Python workers: this project and the running script's directory first."""
    entries = [_PROJECT_ROOT]
    main = sys.modules.get("__main__")
    script = getattr(main, "__file__", None)
    if script:
        entries.append(str(Path(script).resolve().parent))
    entries += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys(entries))


def _ivy_settings() -> dict[str, str]:
    """``spark.jars.ivySettings`` resolving from Maven Central only, unless a mirror is configured.

    ``DEFAULT_ARTIFACT_REPOSITORY`` is Spark's own way to name a mirror (it replaces Central and
    spark-packages in its built-in chain), so it keeps working; ``spark.jars.repositories`` is
    added by Spark after Central either way.
    """
    if os.environ.get("DEFAULT_ARTIFACT_REPOSITORY"):
        return {}
    return {"spark.jars.ivySettings": IVY_SETTINGS}


def check_python(python: str) -> None:
    """Raise SparkSetupError unless ``python`` imports the project and its dependencies.

    Spark's Python workers run ``PYSPARK_PYTHON`` (else ``python3`` from PATH);
    without the project there, ``load()`` fails deep in a worker.
    """
    try:
        done = subprocess.run(
            [python, "-c", _PROBE],
            capture_output=True, text=True, timeout=60,
            env=os.environ | {"PYTHONPATH": _worker_pythonpath()},
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SparkSetupError(
            f"PYSPARK_PYTHON={python!r} cannot be run ({exc}); set it to this interpreter ({sys.executable})"
        ) from exc
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        raise SparkSetupError(
            f"PYSPARK_PYTHON={python!r} cannot import the project ({last}); Spark's Python workers run it. "
            f"Set PYSPARK_PYTHON to an interpreter with flinklike-spark installed (this one: {sys.executable}) "
            f"or install it there: {python} -m pip install 'flinklike-spark[spark]'"
        )


def session(
    app_name: str = "flinklike",
    *,
    master: str | None = "local[2]",
    remote: str | None = None,
    config: Mapping[str, Any] | None = None,
    delta_package: str = DELTA_SPARK_PACKAGE,
):
    """Build (or get) a SparkSession with Delta Lake and the ``flinklike`` data source.

    Sets ``PYSPARK_PYTHON`` to this interpreter unless it is set (then checks it
    imports the project), and puts this project and the running script's
    directory on the workers' ``PYTHONPATH``, so ``pipeline`` modules next to
    the script import in Spark's workers. Under ``spark-submit`` the JVM
    already runs: the session it configured (``--master``, ``--packages``,
    ``--py-files``) is used and only the data source is registered.

    Args:
        master: Spark master; None keeps what ``spark-submit`` chose.
        remote: a Spark Connect URL (``sc://host:15002``) to connect to instead of
            starting Spark here, or ``"local[N]"`` to start a local Spark Connect
            server with Delta (what ``SparkSession.builder.remote`` accepts);
            ``master`` is then ignored.
        config: extra Spark configuration.
        delta_package: Maven coordinates of delta-spark, resolved by Spark from Maven Central only
            (``spark.jars.ivySettings`` = :data:`IVY_SETTINGS`, unless ``config`` sets it or
            ``DEFAULT_ARTIFACT_REPOSITORY`` names a mirror). Resolved once per machine: a first
            run prints one line per jar it downloads, later ones start from the jars on disk
            (:mod:`flinklike_spark.spark.packages`), unless ``config`` sets ``spark.jars`` or
            ``spark.jars.packages`` itself.

    Raises:
        SparkSetupError: no Java, an unusable ``PYSPARK_PYTHON``, Delta cannot be resolved, or
            Spark did not start (the message gives the cause Spark gave, e.g. a missing
            ``spark.submit.pyFiles`` zip).
    """
    from pyspark.sql import SparkSession

    existing = SparkSession.getActiveSession()
    if existing is not None:
        return register(existing)
    if remote is not None and not remote.startswith("local"):
        # A Spark Connect server elsewhere: its configuration (Delta, Python workers) is its own.
        return register(SparkSession.builder.appName(app_name).remote(remote).getOrCreate())
    if os.environ.get("PYSPARK_GATEWAY_PORT"):
        # Launched by spark-submit: its JVM already runs with the master, packages and
        # Python it was given (--master, --packages, spark.pyspark.python); only register.
        return register(SparkSession.builder.appName(app_name).getOrCreate())
    _java()
    python = os.environ.get("PYSPARK_PYTHON")
    if python:
        check_python(python)
    else:
        os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = _worker_pythonpath()
    builder = SparkSession.builder.appName(app_name)
    if remote is not None:  # "local[N]": a Spark Connect server started here, with the settings below
        builder = builder.remote(remote)
        master = remote
    elif master is not None:
        builder = builder.master(master)
    settings = {
        "spark.jars.packages": delta_package,
        **_ivy_settings(),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.ui.showConsoleProgress": "false",
    }
    if master is not None and master.startswith("local"):
        # Spark's defaults (200 shuffle partitions, 50 for Delta log replay) are for clusters;
        # on a laptop each partition is a task of its own and dominates a micro-batch.
        settings |= {"spark.sql.shuffle.partitions": "2", "spark.databricks.delta.snapshotPartitions": "2"}
        # Python workers fork from a daemon that imported this project once (python_daemon.py). Local only:
        # PYSPARK_PYTHON was checked above to import the project; an executor's Python that cannot would
        # fail its daemon before the project's own message naming the fix ("cannot be imported on the
        # Spark executor").
        settings["spark.python.daemon.module"] = "flinklike_spark.spark.python_daemon"
    user = dict(config or {})
    settings |= user
    if not {"spark.jars", "spark.jars.packages"} & user.keys():
        # Resolved once and recorded (packages.py): later sessions start from the jars, without Ivy's output.
        jars = package_jars(delta_package, {k: str(v) for k, v in settings.items() if k.startswith("spark.jars.")})
        if jars is not None:
            del settings["spark.jars.packages"]
            settings.pop("spark.jars.ivySettings", None)  # loading it prints a line; nothing is resolved now
            settings["spark.jars"] = ",".join(jars)
    for key, value in settings.items():
        builder = builder.config(key, str(value))
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # noqa: BLE001 - pyspark raises several types for a JVM that did not start
        raise _startup_error(exc, delta_package) from exc
    return register(spark)


def _java_cause(exc: BaseException) -> str | None:
    """The Java exception behind a Py4JJavaError as Spark gave it, with its innermost cause; else None.

    A Py4JJavaError's text is ``An error occurred while calling X.\n: <Throwable.toString()>``
    followed by the stack trace and its ``Caused by: ...`` lines.
    """
    lines = str(exc).splitlines()
    causes = [line[len(": ") :].strip() for line in lines if line.startswith(": ")][:1]
    if not causes:
        return None
    causes += [line[len("Caused by: ") :].strip() for line in lines if line.startswith("Caused by: ")]
    return causes[0] if len(causes) == 1 else f"{causes[0]} (caused by {causes[-1]})"


def _startup_error(exc: BaseException, delta_package: str) -> SparkSetupError:
    """What to report when ``getOrCreate`` failed: the cause Spark gave, or where its JVM printed it."""
    cause = _java_cause(exc)
    if cause is not None:
        # The JVM runs and SparkContext failed: Spark named the cause (a missing spark.submit.pyFiles
        # zip is a FileNotFoundException); the Delta package was resolved when the JVM started.
        hint = ""
        if "FileNotFoundException" in cause:
            hint = "; every path in spark.submit.pyFiles, spark.files and spark.jars (--py-files, ...) must exist"
        return SparkSetupError(f"Spark did not start: {cause}{hint}")
    return SparkSetupError(
        f"Spark did not start ({type(exc).__name__}: {str(exc)[:300]}); Spark's own error is printed above. "
        f"If it could not resolve package {delta_package!r}: Spark downloads it from Maven Central into "
        f"~/.ivy2.5.2 on first use, so check network access, or point spark.jars.repositories at a mirror, or "
        f"pass delta_package= with coordinates that exist (io.delta:delta-spark_<spark>_<scala>:<version>)"
    )


def register(spark):
    """Register the ``flinklike`` data source with ``spark`` (classic or Spark Connect) and return ``spark``.

    With a classic session this process knows the interpreter of Spark's Python
    workers and checks that it imports the project. A Spark Connect session
    runs its Python workers on the Connect server, which may be another
    machine: nothing local is checked, and the data source is registered with
    the server (it must have flinklike-spark installed).

    On a classic session it also installs the owner of the engine jobs of
    ``writeStream.format("flinklike").option("pipeline", ...)`` queries in this
    (the driver) process (:mod:`flinklike_spark.spark.writer_jobs`).

    Raises:
        SparkSetupError: the session's Python workers cannot import the project.
    """
    from flinklike_spark.spark.source import FlinklikeDataSource
    from flinklike_spark.spark.writer_jobs import install_owner

    if not is_connect_session(spark):
        python = spark.sparkContext.pythonExec or os.environ.get("PYSPARK_PYTHON") or "python3"
        if os.path.realpath(shutil.which(python) or python) != os.path.realpath(sys.executable):
            check_python(python)
    spark.dataSource.register(FlinklikeDataSource)
    install_owner(spark)
    return spark
