"""Real object-store servers on loopback for the storage tests: moto's S3 server and Azurite.

``s3_server`` runs moto's ``ThreadedMotoServer`` in this process
(:func:`tests.support.moto_s3.running_s3_server`);
``azurite_server`` runs Azurite's blob service as a child process, installed
from npm into ``<repo>/.cache/azurite-<version>`` on first use together with
the Node.js runtime it needs (skipped, with the reason, only where npm is
missing). Both listen on 127.0.0.1 on a free port and stop at the end of the
session, leaving no process behind.

Azurite 3.37 or newer is required: older ones ignore the ``startFrom`` parameter
of List Blobs, which delta-rs 1.6 (object_store 0.13) sends to list the log
from a version on, so the third commit to any table failed ("Invalid table
version: 1"; docs/architecture.md, Object storage). Azurite 3.37 needs Node.js
22 (its ``engines``), so the fixture installs npm's ``node@22`` package beside
it and runs Azurite with that, whatever Node.js the machine has.

``store`` is parametrized over both: a :class:`Store` gives the Flink
configuration keys of the server and fresh URLs under it.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from flinklike_spark._runtime.network.ports import free_port
from tests.support.moto_s3 import running_s3_server, wait_listening
from tests.support.object_stores import (
    AZURITE_ACCOUNT,
    AZURITE_DIR,
    AZURITE_KEY,
    AZURITE_NODE,
    AZURITE_VERSION,
    Store,
)


@pytest.fixture(scope="session")
def s3_server():
    with running_s3_server() as store:
        yield store


def _azurite_command() -> list[str]:
    """``[node, azurite-blob's script]``, both installed from npm into ``AZURITE_DIR`` on first use."""
    modules = AZURITE_DIR / "node_modules"
    command = [modules / ".bin" / "node", modules / "azurite" / "dist" / "src" / "blob" / "main.js"]
    if not all(path.exists() for path in command):
        if shutil.which("npm") is None:
            pytest.skip("Azurite is installed with npm (Node.js), which is not installed here")
        AZURITE_DIR.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["npm", "install", "--prefix", str(AZURITE_DIR), f"azurite@{AZURITE_VERSION}", f"node@{AZURITE_NODE}",
             "--no-audit", "--no-fund"],
            check=True, stdout=subprocess.DEVNULL, timeout=600,
        )  # fmt: skip
        missing = [str(path) for path in command if not path.exists()]
        assert not missing, f"npm install into {AZURITE_DIR} did not provide {missing}"
    return [str(path) for path in command]


@pytest.fixture(scope="session")
def azurite_server(tmp_path_factory):
    command = _azurite_command()
    port = free_port()
    workdir = tmp_path_factory.mktemp("azurite")
    log = open(workdir / "azurite.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [*command, "--inMemoryPersistence", "--disableTelemetry", "--skipApiVersionCheck",
         "--blobHost", "127.0.0.1", "--blobPort", str(port)],
        stdout=log, stderr=subprocess.STDOUT, cwd=workdir,
    )  # fmt: skip
    try:
        wait_listening(port, "Azurite", process)
        endpoint = f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}"
        config = {
            f"fs.azure.account.key.{AZURITE_ACCOUNT}.blob.core.windows.net": AZURITE_KEY,
            f"fs.azure.account.endpoint.{AZURITE_ACCOUNT}": endpoint,
        }
        store = Store(name="azure", root="az://flinklike-test", config=config)
        fs, _ = store.filesystem(store.root)
        fs.mkdir("flinklike-test")
        yield store
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


@pytest.fixture(params=["s3", "azure"])
def store(request) -> Store:
    return request.getfixturevalue("s3_server" if request.param == "s3" else "azurite_server")
