"""moto's S3 server on loopback, for the storage tests (tests/objectstore/conftest.py) and benchmarks.

:func:`running_s3_server` runs moto's ``ThreadedMotoServer`` (it honours
``If-None-Match``, which Delta's conditional-put commits rely on) in this
process, serving S3 alone, on a free port of 127.0.0.1, with the bucket
:data:`~tests.support.object_stores.S3_BUCKET` created; it stops the server on
exit.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Iterator

from flinklike_spark._runtime.network.ports import free_port
from tests.support.object_stores import S3_ACCESS_KEY, S3_BUCKET, S3_SECRET_KEY, Store

__all__ = ["running_s3_server", "wait_listening"]


def wait_listening(port: int, what: str, process=None, timeout: float = 60.0) -> None:
    """Wait until something listens on 127.0.0.1:``port``; fail early if ``process`` (a Popen) exited."""
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


@contextlib.contextmanager
def running_s3_server() -> Iterator[Store]:
    """moto's S3 server with the test bucket; yields the :class:`Store` that reaches it."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    port = free_port()
    server = _s3_only_moto_server(port)
    server.start()
    try:
        wait_listening(port, "moto's S3 server")
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
