"""Spark packages (delta-spark) resolved once, then started from the jars on disk.

``spark.jars.packages`` makes Spark resolve the package's dependency tree with
Ivy at every session start, printing about 45 lines although every jar is
cached (and about 130 on the first run). :func:`package_jars` resolves a
package once, in a ``spark-submit`` of its own whose Ivy output is read here
(one line per downloaded artifact reaches the user), and records the jars Spark
retrieved in a manifest; later sessions start from those jars
(``spark.jars``), with no resolution and nothing printed. A manifest whose jars
are gone is resolved again.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

__all__ = ["downloads_in", "package_jars"]

log = logging.getLogger(__name__)

#: Where resolved packages' jar lists are kept (one JSON file: package coordinates -> jar paths).
DEFAULT_MANIFEST = Path.home() / ".cache" / "flinklike" / "spark-packages.json"

_RESOLVE_TIMEOUT_SECONDS = 600.0

# Ivy's line for each artifact it downloads: "downloading https://.../group/name/1.0/name-1.0.jar ..."
_DOWNLOADING = re.compile(r"^\s*downloading (?P<url>\S+?)/(?P<file>[^/\s]+\.jar)\b")

_PRINT_JARS = (
    "from pyspark.core.context import SparkContext\n"
    "SparkContext._ensure_initialized()\n"
    "print('FLINKLIKE_JARS=' + SparkContext._jvm.org.apache.spark.SparkConf(True).get('spark.jars', ''))\n"
)


def downloads_in(ivy_output: str) -> list[str]:
    """The jar files Ivy's output says it downloaded, in order (one entry per artifact)."""
    return [m["file"] for line in ivy_output.splitlines() if (m := _DOWNLOADING.match(line))]


def _spark_submit() -> str:
    from pyspark.find_spark_home import _find_spark_home

    return str(Path(_find_spark_home()) / "bin" / "spark-submit")


def _read_manifest(path: Path) -> dict[str, list[str]]:
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return document if isinstance(document, dict) else {}


def _write_manifest(path: Path, document: Mapping[str, list[str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as out:
        json.dump(document, out, indent=2)
    os.replace(out.name, path)  # atomic: a concurrent session reads the old or the new list


def package_jars(
    package: str,
    settings: Mapping[str, str],
    *,
    manifest: Path = DEFAULT_MANIFEST,
    announce: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
) -> list[str] | None:
    """The local jars of ``package`` and its dependencies, resolved once; None if they cannot be resolved here.

    Args:
        settings: the Spark configuration that steers resolution (``spark.jars.ivySettings``,
            ``spark.jars.repositories``, ``spark.jars.ivy``); it is part of the manifest's key.
        manifest: the JSON file that keeps each resolution.
        announce: prints one line per artifact downloaded on a first resolution.

    Returns None (the caller then lets Spark resolve ``spark.jars.packages`` itself, which
    reports the error) when ``spark-submit`` fails, e.g. without network on a first run.
    """
    resolution = {k: v for k, v in sorted(settings.items()) if k.startswith("spark.jars.")}
    key = json.dumps([package, resolution])
    known = _read_manifest(manifest).get(key)
    if isinstance(known, list) and known and all(os.path.isfile(j) for j in known):
        return known
    command = [_spark_submit(), "--packages", package]
    for name, value in resolution.items():
        command += ["--conf", f"{name}={value}"]
    with tempfile.TemporaryDirectory() as scratch:
        script = Path(scratch) / "print_jars.py"
        script.write_text(_PRINT_JARS)
        env = os.environ | {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
        try:
            done = subprocess.run(
                [*command, str(script)], capture_output=True, text=True, timeout=_RESOLVE_TIMEOUT_SECONDS, env=env
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.warning("cannot resolve %s with spark-submit (%s); Spark resolves it at session start", package, exc)
            return None
    output = done.stdout + done.stderr
    log.debug("spark-submit's resolution of %s (exit %s):\n%s", package, done.returncode, output)
    for jar in downloads_in(output):
        announce(f"downloaded {jar} (Spark package {package}, once)")
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("FLINKLIKE_JARS=")), None)
    jars = [j.removeprefix("file://").removeprefix("file:") for j in (line or "").partition("=")[2].split(",") if j]
    if done.returncode != 0 or not jars or not all(os.path.isfile(j) for j in jars):
        log.warning("cannot resolve %s with spark-submit (exit %s); Spark resolves it at session start:\n%s",
                    package, done.returncode, output[-2000:])  # fmt: skip
        return None
    document = _read_manifest(manifest)
    document[key] = jars
    _write_manifest(manifest, document)
    return jars
