"""RestServerEndpoint: Flink's REST API and the web dashboard of a cluster endpoint.

A standard-library :class:`~http.server.ThreadingHTTPServer` (one thread per
request) bound to ``rest.bind-address`` (loopback by default) and
``rest.port``. Handlers never touch a JobMaster from their own thread: each
posts a function to the JobMaster's main thread and waits for its answer
(at most :data:`MAIN_THREAD_TIMEOUT` seconds, else ``503``), so reads see a
consistent graph without locks. Metrics come from the
:class:`~flinklike_spark._runtime.rest.metric_store.MetricStore`, refreshed
from the TaskExecutors (on the request thread) when older than
``metrics.fetcher.update-interval``.

Routes (Flink's, also under ``/v1``): ``GET /config``, ``/overview``,
``/jobs``, ``/jobs/overview``, ``/jobs/:jobid``, ``/jobs/:jobid/plan``,
``/jobs/:jobid/checkpoints``, ``/jobs/:jobid/checkpoints/config``,
``/jobs/:jobid/checkpoints/details/:checkpointid``,
``/jobs/:jobid/exceptions``, ``/jobs/:jobid/metrics``,
``/jobs/:jobid/vertices/:vertexid`` (and ``/backpressure``,
``/watermarks``, ``/metrics``, ``/subtasks/metrics``), ``/taskmanagers``,
``/jobs/:jobid/savepoints/:triggerid``; ``POST /jobs/:jobid/savepoints``; ``POST /jobs/:jobid/stop``;
``PATCH /jobs/:jobid?mode=cancel`` (``web.cancel.enable``). Errors are
Flink's ``{"errors": [...]}`` with 400/403/404/405/409/503. Everything else
is a static file of the dashboard (``static/``), ``/`` its index.
"""

from __future__ import annotations

import concurrent.futures
import errno
import json
import logging
import mimetypes
import re
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

from flinklike_spark._runtime.graph.execution_state import JobStatus
from flinklike_spark._runtime.jobmaster.checkpoint_stats import HISTORY_SIZE
from flinklike_spark._runtime.rest import job_views
from flinklike_spark._runtime.rest.metric_store import MetricStore
from flinklike_spark.config import Configuration
from flinklike_spark.errors import JobNotRunningError, RescaleRefusedError

__all__ = ["DEFAULT_PORT", "MAIN_THREAD_TIMEOUT", "RestError", "RestServerEndpoint"]

log = logging.getLogger(__name__)

DEFAULT_PORT = 8081
MAIN_THREAD_TIMEOUT = 5.0
"""Seconds a request waits for the JobMaster's main thread before it answers 503."""


class RestError(Exception):
    """An HTTP error answered as Flink's ``{"errors": [message]}``."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


Route = tuple[str, re.Pattern[str], Callable[..., Any]]


class RestServerEndpoint:
    """Serves one cluster's REST API and dashboard. ``start`` binds, ``close`` stops (idempotent).

    Args:
        config: the cluster configuration (``rest.*``, ``web.*``, ``metrics.fetcher.update-interval``,
            and the checkpointing options reported per job).
        jobs: returns ``job id -> JobMaster`` of every job the cluster ran.
        main_thread: the JobMasters' main-thread executor.
        resource_manager: the cluster's ResourceManager (TaskExecutors, slots, metric pulls).
        metric_store: the cluster's task metrics.
    """

    def __init__(
        self,
        config: Configuration,
        *,
        jobs: Callable[[], dict[str, Any]],
        main_thread,
        resource_manager,
        metric_store: MetricStore,
        adaptive_jobs: Callable[[], dict[str, Any]] = dict,
    ) -> None:
        self._config = config
        self._adaptive_jobs = adaptive_jobs  # job id -> AdaptiveJob (resource requirements, rescales)
        self._options = config.rest
        self._jobs = jobs
        self._main = main_thread
        self._rm = resource_manager
        self.metric_store = metric_store
        self._savepoints: dict[tuple[str, str], concurrent.futures.Future] = {}
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._routes = self._build_routes()

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Bind ``rest.bind-address``:``rest.port`` and serve on a daemon thread.

        If ``rest.port`` was not configured and Flink's default 8081 is taken, a
        free port is used (and logged) instead; an explicitly configured port
        that is taken raises OSError naming it.
        """
        options = self._options
        handler = _handler_class(self)
        try:
            server = ThreadingHTTPServer((options.bind_address, options.port), handler)
        except OSError as exc:
            if options.port_explicit or exc.errno != errno.EADDRINUSE:
                raise OSError(
                    exc.errno,
                    f"cannot bind the REST server to {options.bind_address}:{options.port} "
                    f"(rest.bind-address, rest.port): {exc.strerror}; set rest.port to a free port or 0",
                ) from exc
            server = ThreadingHTTPServer((options.bind_address, 0), handler)
            log.info("port %d is taken; the REST server uses port %d (set rest.port to choose)", options.port,
                     server.server_address[1])  # fmt: skip
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="rest-server", daemon=True)  # fmt: skip
        self._thread.start()
        log.info("REST API and web dashboard at %s", self.url)

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the REST server is not started")
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        """``http://<rest.address or the bind address>:<port>``."""
        host = self._options.address or self._options.bind_address
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        return f"http://{host}:{self.port}"

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    # -- plumbing ------------------------------------------------------------------------------

    def _on_main_thread(self, fn: Callable[[], Any]) -> Any:
        answer: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            try:
                answer.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - handed to the request thread
                answer.set_exception(exc)

        try:
            self._main.execute(run)
            return answer.result(MAIN_THREAD_TIMEOUT)
        except concurrent.futures.TimeoutError:
            raise RestError(HTTPStatus.SERVICE_UNAVAILABLE, "the JobMaster's main thread is busy; retry") from None
        except RuntimeError as exc:
            if "shut" in str(exc):
                raise RestError(HTTPStatus.SERVICE_UNAVAILABLE, "the cluster is shutting down") from None
            raise

    def _job(self, job_id: str):
        job = self._jobs().get(job_id)
        if job is None:
            raise RestError(HTTPStatus.NOT_FOUND, f"Job {job_id} not found")
        return job

    def _refresh_metrics(self) -> None:
        try:
            self.metric_store.refresh_if_older(
                self._options.fetcher_update_interval.total_seconds(), lambda: self._rm.task_metrics(timeout=1.0)
            )
        except Exception:  # noqa: BLE001 - stale metrics are better than no answer
            log.debug("could not fetch task metrics", exc_info=True)

    def _with_metrics(self, job_id: str, build: Callable[[Any, Callable], Any]) -> Any:
        job = self._job(job_id)
        self._refresh_metrics()
        return self._on_main_thread(lambda: build(job, self.metric_store.task))

    def _vertex(self, job, vertex_id: str):
        if vertex_id not in job.graph.job_vertices:
            raise RestError(HTTPStatus.NOT_FOUND, f"Vertex {vertex_id} of job {job.job_id} not found; "
                            f"vertices: {sorted(job.graph.job_vertices)}")  # fmt: skip

    # -- routes --------------------------------------------------------------------------------

    def _build_routes(self) -> list[Route]:
        job, vertex = r"(?P<job_id>[^/]+)", r"(?P<vertex_id>[^/]+)"
        table = [
            ("GET", r"/config", self.get_config),
            ("GET", r"/overview", self.get_overview),
            ("GET", r"/jobs", self.get_jobs),
            ("GET", r"/jobs/overview", self.get_jobs_overview),
            ("GET", rf"/jobs/{job}", self.get_job),
            ("PATCH", rf"/jobs/{job}", self.patch_job),
            ("GET", rf"/jobs/{job}/plan", self.get_plan),
            ("GET", rf"/jobs/{job}/checkpoints", self.get_checkpoints),
            ("GET", rf"/jobs/{job}/checkpoints/config", self.get_checkpoint_config),
            ("GET", rf"/jobs/{job}/checkpoints/details/(?P<checkpoint_id>\d+)", self.get_checkpoint_details),
            ("GET", rf"/jobs/{job}/exceptions", self.get_exceptions),
            ("GET", rf"/jobs/{job}/metrics", self.get_job_metrics),
            ("POST", rf"/jobs/{job}/savepoints", self.post_savepoint),
            ("POST", rf"/jobs/{job}/stop", self.post_stop),
            ("GET", rf"/jobs/{job}/savepoints/(?P<trigger_id>[^/]+)", self.get_savepoint),
            ("GET", rf"/jobs/{job}/vertices/{vertex}", self.get_vertex),
            ("GET", rf"/jobs/{job}/vertices/{vertex}/backpressure", self.get_backpressure),
            ("GET", rf"/jobs/{job}/vertices/{vertex}/watermarks", self.get_watermarks),
            ("GET", rf"/jobs/{job}/vertices/{vertex}/metrics", self.get_vertex_metrics),
            ("GET", rf"/jobs/{job}/vertices/{vertex}/subtasks/metrics", self.get_subtasks_metrics),
            ("GET", rf"/jobs/{job}/resource-requirements", self.get_resource_requirements),
            ("PUT", rf"/jobs/{job}/resource-requirements", self.put_resource_requirements),
            ("GET", rf"/jobs/{job}/rescales", self.get_rescales),
            ("GET", rf"/jobs/{job}/autoscaler", self.get_autoscaler),
            ("GET", r"/taskmanagers", self.get_taskmanagers),
        ]
        return [(method, re.compile(f"{pattern}/?"), fn) for method, pattern, fn in table]

    def dispatch(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> tuple[HTTPStatus, Any]:
        """Route one API request; returns (status, JSON body). Raises RestError, or KeyError if no API route."""
        if path.startswith("/v1/"):
            path = path[3:]
        allowed = []
        for route_method, pattern, fn in self._routes:
            match = pattern.fullmatch(path)
            if match is None:
                continue
            if route_method != method:
                allowed.append(route_method)
                continue
            params = {k: urllib.parse.unquote(v) for k, v in match.groupdict().items()}
            return fn(query=query, body=body, **params)
        if allowed:
            raise RestError(HTTPStatus.METHOD_NOT_ALLOWED, f"{method} is not allowed on {path}; allowed: {allowed}")
        raise KeyError(path)

    # -- cluster -------------------------------------------------------------------------------

    def get_config(self, **_) -> tuple[HTTPStatus, Any]:
        offset = -time.timezone if not time.localtime().tm_isdst else -time.altzone
        return HTTPStatus.OK, {
            "refresh-interval": int(self._options.refresh_interval.total_seconds() * 1000),
            "timezone-name": time.tzname[time.localtime().tm_isdst > 0],
            "timezone-offset": offset * 1000,
            "flink-version": job_views.FLINK_VERSION,
            "flink-revision": "flinklike-spark",
            "features": {
                "web-submit": False,
                "web-cancel": self._options.cancel_enabled,
                "web-history": False,
                "web-rescale": False,
            },  # fmt: skip
        }

    def get_overview(self, **_) -> tuple[HTTPStatus, Any]:
        infos = self._rm.task_executor_infos()
        total = sum(e.num_slots for e, _, _ in infos)
        used = sum(allocated for _, allocated, _ in infos)
        statuses = self._on_main_thread(lambda: [j.status for j in self._jobs().values()])
        return HTTPStatus.OK, {
            "taskmanagers": len(infos),
            "slots-total": total,
            "slots-available": max(0, total - used),
            "jobs-running": sum(1 for s in statuses if not s.is_globally_terminal),
            "jobs-finished": statuses.count(JobStatus.FINISHED),
            "jobs-cancelled": statuses.count(JobStatus.CANCELED),
            "jobs-failed": statuses.count(JobStatus.FAILED),
            "slots-free-and-blocked": 0,
            "taskmanagers-blocked": 0,
            "flink-version": job_views.FLINK_VERSION,
            "flink-commit": "flinklike-spark",
        }

    def get_taskmanagers(self, **_) -> tuple[HTTPStatus, Any]:
        result = []
        for executor, allocated, since in self._rm.task_executor_infos():
            slots = executor.num_slots
            resource = {"cpuCores": float(slots), "taskHeapMemory": 0, "taskOffHeapMemory": 0, "managedMemory": 0,
                        "networkMemory": 0, "extendedResources": {}}  # fmt: skip
            free = dict(resource, cpuCores=float(slots - allocated))
            host, _, data_port = executor.address.rpartition(":")
            result.append({
                "id": executor.resource_id,
                "path": executor.address,
                "dataPort": int(data_port) if data_port.isdigit() else -1,
                "jmxPort": -1,
                "blocked": False,
                "timeSinceLastHeartbeat": int(since * 1000),
                "slotsNumber": slots,
                "freeSlots": slots - allocated,
                "totalResource": resource,
                "freeResource": free,
                "hardware": {"cpuCores": executor.cpu_cores, "physicalMemory": executor.physical_memory,
                             "freeMemory": 0, "managedMemory": 0},  # fmt: skip
                "memoryConfiguration": {},
                "pid": executor.pid,
            })  # fmt: skip
        return HTTPStatus.OK, {"taskmanagers": result}

    # -- jobs ----------------------------------------------------------------------------------

    def get_jobs(self, **_) -> tuple[HTTPStatus, Any]:
        jobs = self._on_main_thread(lambda: [{"id": j.job_id, "status": j.status.name} for j in self._jobs().values()])
        return HTTPStatus.OK, {"jobs": jobs}

    def get_jobs_overview(self, **_) -> tuple[HTTPStatus, Any]:
        jobs = self._on_main_thread(lambda: [job_views.job_overview(j) for j in self._jobs().values()])
        return HTTPStatus.OK, {"jobs": jobs}

    def get_job(self, *, job_id: str, **_) -> tuple[HTTPStatus, Any]:
        return HTTPStatus.OK, self._with_metrics(job_id, job_views.job_details)

    def get_plan(self, *, job_id: str, **_) -> tuple[HTTPStatus, Any]:
        job = self._job(job_id)
        return HTTPStatus.OK, {"plan": self._on_main_thread(lambda: job_views.job_plan(job))}

    def get_exceptions(self, *, job_id: str, query, **_) -> tuple[HTTPStatus, Any]:
        job = self._job(job_id)
        limit = _int_param(query, "maxExceptions", 20)
        return HTTPStatus.OK, self._on_main_thread(lambda: job_views.job_exceptions(job, limit))

    def get_checkpoints(self, *, job_id: str, **_) -> tuple[HTTPStatus, Any]:
        job = self._job(job_id)
        return HTTPStatus.OK, self._checkpointing(
            job, self._on_main_thread(lambda: job_views.checkpoint_statistics(job))
        )

    def get_checkpoint_config(self, *, job_id: str, **_) -> tuple[HTTPStatus, Any]:
        job = self._job(job_id)
        return HTTPStatus.OK, self._checkpointing(job, self._on_main_thread(
            lambda: job_views.checkpoint_config(job, self._config)))  # fmt: skip

    def get_checkpoint_details(self, *, job_id: str, checkpoint_id: str, **_) -> tuple[HTTPStatus, Any]:
        job = self._job(job_id)
        self._checkpointing(job, job.checkpoints)
        details = self._on_main_thread(lambda: job_views.checkpoint_details(job, int(checkpoint_id)))
        if details is None:
            raise RestError(HTTPStatus.NOT_FOUND, f"Could not find checkpointing statistics for checkpoint "
                            f"{checkpoint_id} (only the newest {HISTORY_SIZE} are kept)")  # fmt: skip
        return HTTPStatus.OK, details

    @staticmethod
    def _checkpointing(job, value):
        if value is None:
            raise RestError(HTTPStatus.NOT_FOUND, f"Checkpointing is not enabled for job {job.job_id} "
                            "(set execution.checkpointing.dir and execution.checkpointing.interval)")  # fmt: skip
        return value

    def get_job_metrics(self, *, job_id: str, query, **_) -> tuple[HTTPStatus, Any]:
        job = self._job(job_id)
        return HTTPStatus.OK, _metric_list(self._on_main_thread(lambda: job_views.job_metrics(job)), query)

    def patch_job(self, *, job_id: str, query, **_) -> tuple[HTTPStatus, Any]:
        mode = (query.get("mode") or ["cancel"])[0]
        if mode != "cancel":
            raise RestError(HTTPStatus.BAD_REQUEST, f"unsupported mode {mode!r}; valid: cancel")
        if not self._options.cancel_enabled:
            raise RestError(HTTPStatus.FORBIDDEN, "Cancelling jobs is disabled (web.cancel.enable: false)")
        job = self._job(job_id)

        def cancel() -> JobStatus:
            status = job.status
            if not status.is_globally_terminal:
                job.cancel_now(by=f"a REST request (PATCH /jobs/{job_id}?mode=cancel, as the dashboard's Cancel sends)")
            return status

        status = self._on_main_thread(cancel)
        if status in (JobStatus.FINISHED, JobStatus.FAILED):
            raise RestError(HTTPStatus.CONFLICT, f"Job {job_id} was not cancelled: it already {status.name}")
        return HTTPStatus.ACCEPTED, {}

    def post_savepoint(self, *, job_id: str, body, **_) -> tuple[HTTPStatus, Any]:
        job = self._job(job_id)
        body = body or {}
        if not isinstance(body, dict):
            raise RestError(HTTPStatus.BAD_REQUEST, f"the request body must be a JSON object, got {body!r}")
        self._check_target(body, "target-directory")
        return self._start_savepoint(job_id, job, body, stop=bool(body.get("cancel-job", False)))

    def post_stop(self, *, job_id: str, body, **_) -> tuple[HTTPStatus, Any]:
        """Flink's stop-with-savepoint (``flink stop``); its progress is at ``/jobs/:jobid/savepoints/:triggerid``."""
        job = self._job(job_id)
        body = body or {}
        if not isinstance(body, dict):
            raise RestError(HTTPStatus.BAD_REQUEST, f"the request body must be a JSON object, got {body!r}")
        if body.get("drain"):
            raise RestError(HTTPStatus.BAD_REQUEST, "drain (advance to the end of event time) is not supported: stop "
                            "without it and let the restored job's sources drive event time")  # fmt: skip
        self._check_target(body, "targetDirectory")
        return self._start_savepoint(job_id, job, body, stop=True)

    def _adaptive_job(self, job_id: str):
        job = self._adaptive_jobs().get(job_id)
        if job is None:
            raise RestError(HTTPStatus.NOT_FOUND, f"Job {job_id} not found")
        return job

    def get_resource_requirements(self, *, job_id: str, **_) -> tuple[HTTPStatus, Any]:
        """FLIP-291: per vertex ``{"parallelism": {"lowerBound": l, "upperBound": u}}``."""
        return HTTPStatus.OK, self._adaptive_job(job_id).requirements.to_json()

    def put_resource_requirements(self, *, job_id: str, body, **_) -> tuple[HTTPStatus, Any]:
        """FLIP-291: checked at once (400 names what is wrong); a rescale it causes runs on (see /rescales)."""
        job = self._adaptive_job(job_id)
        try:
            job.put_requirements_json(body, cause=f"PUT /jobs/{job_id}/resource-requirements")
        except RescaleRefusedError as exc:
            raise RestError(HTTPStatus.BAD_REQUEST, str(exc)) from None
        except JobNotRunningError as exc:
            raise RestError(HTTPStatus.CONFLICT, str(exc)) from None
        return HTTPStatus.OK, {}

    def get_rescales(self, *, job_id: str, **_) -> tuple[HTTPStatus, Any]:
        """The job's rescales, oldest first, and its scheduler state (flinklike's; not in Flink's API)."""
        job = self._adaptive_job(job_id)
        return HTTPStatus.OK, {"state": job.state.name, "rescales": [e.to_json() for e in job.rescales],
                               "numFailures": job.num_failures, "lastFailure": job.last_failure}  # fmt: skip

    def get_autoscaler(self, *, job_id: str, **_) -> tuple[HTTPStatus, Any]:
        """The autoscaler's status, its last evaluation per vertex and its decisions (docs/elastic.md)."""
        scaler = self._adaptive_job(job_id).autoscaler
        if scaler is None:
            return HTTPStatus.OK, {"enabled": False, "decisions": []}
        return HTTPStatus.OK, scaler.to_json()

    def _check_target(self, body: dict, key: str) -> None:
        target = body.get(key)
        directory = self._config.checkpointing.directory
        if target not in (None, "", directory):
            raise RestError(HTTPStatus.BAD_REQUEST, f"{key} {target!r}: savepoints are written to "
                            f"execution.checkpointing.dir ({directory}); omit {key}")  # fmt: skip

    def _start_savepoint(self, job_id: str, job, body: dict, *, stop: bool) -> tuple[HTTPStatus, Any]:
        status = self._on_main_thread(lambda: job.status)
        if status.is_globally_terminal:
            raise RestError(HTTPStatus.CONFLICT, f"cannot take a savepoint of job {job_id}: it is {status.name}")
        trigger_id = body.get("triggerId") or uuid.uuid4().hex
        self._savepoints[(job_id, trigger_id)] = job.trigger_savepoint(stop=stop)
        return HTTPStatus.ACCEPTED, {"request-id": trigger_id}

    def get_savepoint(self, *, job_id: str, trigger_id: str, **_) -> tuple[HTTPStatus, Any]:
        self._job(job_id)
        future = self._savepoints.get((job_id, trigger_id))
        if future is None:
            raise RestError(HTTPStatus.NOT_FOUND, f"There is no savepoint operation with triggerId={trigger_id} "
                            f"for job {job_id}")  # fmt: skip
        if not future.done():
            return HTTPStatus.OK, {"status": {"id": "IN_PROGRESS"}, "operation": None}
        error = future.exception()
        if error is not None:
            cause = {"class": f"{type(error).__module__}.{type(error).__name__}", "stack-trace": str(error),
                     "serialized-throwable": None}  # fmt: skip
            return HTTPStatus.OK, {"status": {"id": "COMPLETED"}, "operation": {"failure-cause": cause}}
        return HTTPStatus.OK, {"status": {"id": "COMPLETED"}, "operation": {"location": future.result().path}}

    # -- vertices ------------------------------------------------------------------------------

    def _vertex_view(self, job_id: str, vertex_id: str, build) -> Any:
        def checked(job, metrics_of):
            self._vertex(job, vertex_id)
            return build(job, vertex_id, metrics_of)

        return self._with_metrics(job_id, checked)

    def get_vertex(self, *, job_id: str, vertex_id: str, **_) -> tuple[HTTPStatus, Any]:
        return HTTPStatus.OK, self._vertex_view(job_id, vertex_id, job_views.vertex_details)

    def get_backpressure(self, *, job_id: str, vertex_id: str, **_) -> tuple[HTTPStatus, Any]:
        return HTTPStatus.OK, self._vertex_view(job_id, vertex_id, job_views.vertex_backpressure)

    def get_watermarks(self, *, job_id: str, vertex_id: str, **_) -> tuple[HTTPStatus, Any]:
        return HTTPStatus.OK, self._vertex_view(job_id, vertex_id, job_views.vertex_watermarks)

    def _subtask_metrics(self, job_id: str, vertex_id: str) -> list[dict[str, float]]:
        def build(job, vid, metrics_of):
            ejv = job.graph.get_job_vertex(vid)
            return [metrics_of(v.current_execution.attempt_id.full_id) or {} for v in ejv.task_vertices]

        return self._vertex_view(job_id, vertex_id, build)

    def get_vertex_metrics(self, *, job_id: str, vertex_id: str, query, **_) -> tuple[HTTPStatus, Any]:
        """Flink's ``<subtask>.<metric>`` names of every subtask."""
        flat = {f"{i}.{name}": value for i, metrics in enumerate(self._subtask_metrics(job_id, vertex_id))
                for name, value in metrics.items()}  # fmt: skip
        return HTTPStatus.OK, _metric_list(flat, query)

    def get_subtasks_metrics(self, *, job_id: str, vertex_id: str, query, **_) -> tuple[HTTPStatus, Any]:
        """Aggregates over the subtasks: ``[{"id", "min", "max", "avg", "sum"}]``."""
        per_subtask = self._subtask_metrics(job_id, vertex_id)
        names = sorted({n for m in per_subtask for n in m})
        wanted = _wanted(query)
        result = []
        for name in names if wanted is None else [n for n in wanted if n in names]:
            values = [float(m[name]) for m in per_subtask if name in m]
            result.append({"id": name, "min": min(values), "max": max(values), "avg": sum(values) / len(values),
                           "sum": sum(values)})  # fmt: skip
        return HTTPStatus.OK, result

    # -- static files --------------------------------------------------------------------------

    @staticmethod
    def static_file(path: str) -> tuple[bytes, str] | None:
        """The dashboard file at ``path`` (``/`` is ``index.html``) and its content type, or None."""
        name = "index.html" if path in ("", "/") else path.lstrip("/")
        if not re.fullmatch(r"[A-Za-z0-9_\-]+\.[a-z]+", name):
            return None
        resource = resources.files("flinklike_spark._runtime.rest").joinpath("static", name)
        if not resource.is_file():
            return None
        return resource.read_bytes(), mimetypes.guess_type(name)[0] or "application/octet-stream"


def _int_param(query: dict[str, list[str]], name: str, default: int) -> int:
    values = query.get(name)
    if not values:
        return default
    try:
        return int(values[0])
    except ValueError:
        raise RestError(HTTPStatus.BAD_REQUEST, f"query parameter {name}={values[0]!r} is not an integer") from None


def _wanted(query: dict[str, list[str]]) -> list[str] | None:
    values = query.get("get")
    return None if not values else [n for v in values for n in v.split(",") if n]


def _metric_list(metrics: dict[str, float], query: dict[str, list[str]]) -> list[dict[str, str]]:
    """Flink's metric list: without ``get`` the available ids, with ``get=a,b`` their values as strings."""
    wanted = _wanted(query)
    if wanted is None:
        return [{"id": name} for name in sorted(metrics)]
    return [{"id": name, "value": _format_value(metrics[name])} for name in wanted if name in metrics]


def _format_value(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _handler_class(endpoint: RestServerEndpoint) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "flinklike-rest"
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's signature
            log.debug("%s %s", self.address_string(), format % args)

        def _serve(self, method: str) -> None:
            url = urllib.parse.urlsplit(self.path)
            query = urllib.parse.parse_qs(url.query)
            try:
                body = None
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    raw = self.rfile.read(length)
                    try:
                        body = json.loads(raw) if raw.strip() else None
                    except ValueError:
                        raise RestError(
                            HTTPStatus.BAD_REQUEST, f"the request body is not JSON: {raw[:100]!r}"
                        ) from None
                status, payload = endpoint.dispatch(method, url.path, query, body)
            except RestError as exc:
                self._send_json(exc.status, {"errors": [str(exc)]})
                return
            except KeyError:
                if method == "GET":
                    found = endpoint.static_file(url.path)
                    if found is not None:
                        self._send(HTTPStatus.OK, found[0], found[1])
                        return
                self._send_json(HTTPStatus.NOT_FOUND, {"errors": [f"Not found: {url.path}"]})
                return
            except Exception as exc:  # noqa: BLE001 - answered as Flink's internal server error
                log.warning("REST %s %s failed", method, url.path, exc_info=True)
                self._send_json(HTTPStatus.INTERNAL_SERVER_ERROR, {"errors": [f"{type(exc).__name__}: {exc}"]})
                return
            self._send_json(status, payload)

        def _send_json(self, status: HTTPStatus, payload: Any) -> None:
            self._send(status, json.dumps(payload).encode(), "application/json; charset=UTF-8")

        def _send(self, status: HTTPStatus, data: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_PATCH(self) -> None:
            self._serve("PATCH")

        def do_PUT(self) -> None:
            self._serve("PUT")

    return Handler
