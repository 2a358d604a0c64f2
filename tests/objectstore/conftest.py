"""Real object-store servers on loopback for the storage tests: moto's S3 server and Azurite.

``s3_server`` runs moto's ``ThreadedMotoServer`` (it honours ``If-None-Match``,
which Delta's conditional-put commits rely on) in this process;
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

import logging
import shutil
import socket
import subprocess
import threading
import time

import pytest

from tests.support.object_stores import (
    AZURITE_ACCOUNT,
    AZURITE_DIR,
    AZURITE_KEY,
    AZURITE_NODE,
    AZURITE_VERSION,
    S3_ACCESS_KEY,
    S3_BUCKET,
    S3_SECRET_KEY,
    Store,
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(port: int, what: str, process: subprocess.Popen | None = None, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode} before listening on port {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {timeout} s")


def _atomic_conditional_puts() -> None:
    """Make moto's conditional PUT atomic, as S3's is.

    moto checks ``If-None-Match: *`` (and ``If-Match``) and then stores the object,
    with nothing between the two: two writers creating the same Delta log entry on
    two server threads can both pass the check, and the second put replaces the
    first writer's commit, which then is lost although both got 200 (seen once in
    a CI run of test_concurrent_commits.py). S3 decides a conditional write
    atomically; a lock around moto's handler does the same here.
    """
    from moto.s3.responses import S3Response

    if getattr(S3Response.put_object, "_flinklike_atomic", False):
        return
    put_object = S3Response.put_object
    lock = threading.Lock()

    def atomic_put_object(self):
        if "If-None-Match" in self.headers or "If-Match" in self.headers:
            with lock:
                return put_object(self)
        return put_object(self)

    atomic_put_object._flinklike_atomic = True
    S3Response.put_object = atomic_put_object


def _s3_only_moto_server(port: int):
    """moto's ThreadedMotoServer serving S3 alone. Its dispatcher otherwise finds the service of every
    request by matching the host and headers against every AWS service's URL patterns, under a lock:
    70 of the 165 CPU-s moto spent in a test run (py-spy of both xdist workers)."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    from moto.server import ThreadedMotoServer
    from werkzeug.serving import make_server

    _atomic_conditional_puts()

    class S3Dispatcher(DomainDispatcherApplication):
        def get_application(self, environ):
            with self.lock:
                app = self.app_instances.get("s3")
                if app is None:
                    app = self.app_instances["s3"] = self.create_app("s3")
                return app

    class S3MotoServer(ThreadedMotoServer):
        def _server_entry(self) -> None:
            self._server = make_server(self._ip_address, self._port, S3Dispatcher(create_backend_app), True)
            self._server_ready_event.set()
            self._server.serve_forever()

    return S3MotoServer(ip_address="127.0.0.1", port=port, verbose=False)


@pytest.fixture(scope="session")
def s3_server():
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    port = _free_port()
    server = _s3_only_moto_server(port)
    server.start()
    try:
        _wait_listening(port, "moto's S3 server")
        endpoint = f"http://127.0.0.1:{port}"
        config = {
            "s3.endpoint": endpoint,
            "s3.access-key": S3_ACCESS_KEY,
            "s3.secret-key": S3_SECRET_KEY,
            "s3.region": "us-east-1",
            "s3.path.style.access": "true",
        }
        import boto3

        boto3.client(
            "s3", endpoint_url=endpoint, aws_access_key_id=S3_ACCESS_KEY, aws_secret_access_key=S3_SECRET_KEY,
            region_name="us-east-1",
        ).create_bucket(Bucket=S3_BUCKET)  # fmt: skip
        yield Store(name="s3", root=f"s3://{S3_BUCKET}", config=config)
    finally:
        server.stop()


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
    port = _free_port()
    workdir = tmp_path_factory.mktemp("azurite")
    log = open(workdir / "azurite.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [*command, "--inMemoryPersistence", "--disableTelemetry", "--skipApiVersionCheck",
         "--blobHost", "127.0.0.1", "--blobPort", str(port)],
        stdout=log, stderr=subprocess.STDOUT, cwd=workdir,
    )  # fmt: skip
    try:
        _wait_listening(port, "Azurite", process)
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
