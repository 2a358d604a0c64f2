"""PyFlink's own programs, taken from the released ``apache-flink`` wheel at test time (never copied
into this repository), with only their import prefix changed: ``pyflink.`` -> ``flinklike_spark.``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

PYFLINK_VERSION = "2.3.0"
CACHE = (
    Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "flinklike-spark" / f"pyflink-{PYFLINK_VERSION}"
)
_IMPORT = re.compile(r"^\s*(from|import)\s+pyflink\b")


def pyflink_wheel() -> Path:
    """The apache-flink wheel (downloaded once with pip, without its dependencies, into the cache).

    Raises:
        RuntimeError: pip could not download it (the reason is pip's).
    """
    wheels = sorted(CACHE.glob("apache_flink-*.whl"))
    if not wheels:
        CACHE.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--disable-pip-version-check",
             f"apache-flink=={PYFLINK_VERSION}", "-d", str(CACHE)],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        wheels = sorted(CACHE.glob("apache_flink-*.whl"))
        if done.returncode != 0 or not wheels:
            raise RuntimeError(f"pip download apache-flink=={PYFLINK_VERSION} failed: {done.stderr.strip()[-500:]}")
    return wheels[-1]


def upstream_source(path: str) -> str:
    """The text of ``pyflink/<path>`` in the wheel (e.g. ``examples/datastream/word_count.py``)."""
    with zipfile.ZipFile(pyflink_wheel()) as wheel:
        return wheel.read(f"pyflink/{path}").decode("utf-8")


def with_imports_changed(source: str) -> str:
    """``source`` with ``pyflink.`` replaced by ``flinklike_spark.`` in its import statements only.

    Raises:
        AssertionError: ``pyflink`` appears anywhere else (the program would not be unchanged).
    """
    lines = []
    for line in source.splitlines():
        if _IMPORT.match(line):
            line = re.sub(r"\bpyflink\b", "flinklike_spark", line)
        lines.append(line)
    changed = "\n".join(lines) + "\n"
    rest = [
        line for line in changed.splitlines() if re.search(r"\bpyflink\b", line) and not line.lstrip().startswith("#")
    ]
    assert not rest, f"pyflink outside the imports: {rest}"
    return changed
