"""The peer engines: pinned packages, one virtual environment each, created on first use.

Every peer runs in its own venv so that its pins (pyarrow, pandas, py4j...)
never meet the project's. Venvs live under ``--venv-dir`` (default
``~/.cache/flinklike-spark/compare-venvs``), named by the pins' hash: a new pin
gets a new venv, an unchanged one is reused by the next run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["PEERS", "Peer", "default_venv_dir", "ensure_venv"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Peer:
    """One peer engine.

    Attributes:
        name: the engine's name in tables and on the command line.
        packages: pip requirement strings, pinned.
        probe: a Python statement that fails unless the venv works.
    """

    name: str
    packages: tuple[str, ...]
    probe: str

    def venv_name(self) -> str:
        digest = hashlib.sha256("\n".join(self.packages).encode()).hexdigest()[:10]
        return f"{self.name}-{digest}"


PEERS: dict[str, Peer] = {
    "bytewax": Peer(
        name="bytewax", packages=("bytewax==0.21.1", "pyarrow>=17", "numpy>=1.26"), probe="import bytewax, pyarrow"
    ),
    # PyFlink's Python worker needs find_libpython in the interpreter's env (thread mode embeds it).
    "pyflink": Peer(
        name="pyflink",
        packages=("apache-flink==2.3.0", "find_libpython==0.4.0"),
        probe="import pyflink.datastream, find_libpython",
    ),
    "spark": Peer(
        name="spark",
        packages=("pyspark==4.2.0", "pandas>=2.1,<3", "pyarrow>=17"),
        probe="import pyspark, pandas, pyarrow",
    ),
}


def default_venv_dir() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "flinklike-spark" / "compare-venvs"


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def ensure_venv(peer: Peer, venv_dir: Path, *, install: bool = True, log=print) -> Path | None:
    """The python of ``peer``'s venv, created and installed if needed; None if it cannot be had.

    A venv is only used once its probe passes after a complete install (a
    marker file records that), so an interrupted install is redone.
    """
    venv = venv_dir / peer.venv_name()
    python = venv_python(venv)
    marker = venv / ".installed"
    if marker.exists() and python.exists():
        return python
    if not install:
        log(f"  {peer.name}: no venv at {venv} and --no-install given: skipped")
        return None
    log(f"  {peer.name}: creating {venv} and installing {' '.join(peer.packages)}", flush=True)
    started = time.monotonic()
    if venv.exists():
        shutil.rmtree(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *peer.packages],
            check=True,
        )
        subprocess.run([str(python), "-c", peer.probe], check=True)
    except (subprocess.CalledProcessError, OSError) as exc:
        log(f"  {peer.name}: install failed ({exc}): skipped")
        return None
    marker.write_text(" ".join(peer.packages) + "\n")
    log(f"  {peer.name}: ready in {time.monotonic() - started:.0f} s")
    return python
