"""Flink's job verbs of the command line: ``list``, ``cancel``, ``savepoint``, ``stop`` and ``rescale``, over REST.

Like ``flink list`` / ``flink cancel <jobId>`` / ``flink savepoint <jobId> [<dir>]`` /
``flink stop [--savepointPath <dir>] <jobId>`` (and ``flinklike rescale <jobId> -p N``: FLIP-291's
``PUT /jobs/:jobid/resource-requirements``, which Flink's CLI lacks), each talks to the REST API of a running cluster: the address
is ``-m host:port`` (Flink's ``--jobmanager``), else ``rest.address`` / ``rest.port`` of the configuration
(``$FLINK_CONF_DIR/config.yaml``; defaults 127.0.0.1 and 8081). Output follows Flink's CLI. Exit status 0 on
success; 1 for an unknown job, an unreachable cluster or a failed savepoint (one line on stderr saying which
and what to do).

A savepoint is written where the job's checkpoints are (``execution.checkpointing.dir``); given another
directory, the command then writes a self-contained copy there with the State Processor API's
``SavepointWriter`` and prints the copy's path, as :meth:`JobClient.trigger_savepoint` does.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
import urllib.error
import urllib.request
from typing import Any

from flinklike_spark.config import Configuration
from flinklike_spark.errors import CheckpointStorageError
from flinklike_spark.global_configuration import load_configuration
from flinklike_spark.job_client import copy_savepoint

__all__ = ["add_job_parsers"]

_POLL_SECONDS = 0.2
_RUNNING = ("CREATED", "RUNNING", "RESTARTING", "FAILING", "CANCELLING")
_SCHEDULED = ("INITIALIZING",)


class _CommandError(Exception):
    """Ends the command with its message on stderr and status 1."""


def add_job_parsers(commands) -> None:
    """Add ``list``, ``cancel``, ``savepoint``, ``stop`` and ``rescale`` to the ``flinklike`` subcommands."""

    def with_address(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        parser.add_argument(
            "-m",
            "--jobmanager",
            metavar="HOST:PORT",
            help="the REST address of the cluster (default: rest.address and rest.port of the configuration)",
        )
        parser.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS",
                            help="how long to wait for a savepoint (default 600)")  # fmt: skip
        return parser

    listing = with_address(commands.add_parser("list", help="list the jobs of a running cluster (Flink's 'list')"))
    listing.add_argument("-r", "--running", action="store_true", help="only running and restarting jobs")
    listing.add_argument("-s", "--scheduled", action="store_true", help="only scheduled jobs")
    listing.add_argument("-a", "--all", action="store_true", help="also finished, failed and cancelled jobs")
    listing.set_defaults(handler=_list_command)

    cancel = with_address(commands.add_parser("cancel", help="cancel a running job (Flink's 'cancel')"))
    cancel.add_argument("job_id", metavar="JOB_ID")
    cancel.set_defaults(handler=_cancel_command)

    savepoint = with_address(commands.add_parser("savepoint", help="take a savepoint of a running job"))
    savepoint.add_argument("job_id", metavar="JOB_ID")
    savepoint.add_argument("directory", nargs="?", metavar="TARGET_DIRECTORY",
                           help="where the savepoint goes (default: the job's checkpoint directory)")  # fmt: skip
    savepoint.set_defaults(handler=_savepoint_command)

    stop = with_address(commands.add_parser("stop", help="stop a job with a savepoint (Flink's 'stop')"))
    stop.add_argument("job_id", metavar="JOB_ID")
    stop.add_argument("-p", "--savepointPath", dest="directory", metavar="DIRECTORY",
                      help="where the savepoint goes (default: the job's checkpoint directory)")  # fmt: skip
    stop.add_argument("-d", "--drain", action="store_true",
                      help="advance to the end of event time first (refused: not supported)")  # fmt: skip
    stop.set_defaults(handler=_stop_command)

    rescale = with_address(
        commands.add_parser(
            "rescale", help="change a running job's parallelism (adaptive scheduler; PUT .../resource-requirements)"
        )
    )
    rescale.add_argument("job_id", metavar="JOB_ID")
    rescale.add_argument(
        "-p", "--parallelism", type=int, metavar="N", help="the upper bound of every vertex's parallelism"
    )
    rescale.add_argument(
        "--vertex",
        action="append",
        default=[],
        metavar="VERTEX_ID=N",
        help="the upper bound of one vertex (repeatable; overrides -p for it)",
    )
    rescale.set_defaults(handler=_rescale_command)


# -- the REST client ---------------------------------------------------------------------------------


class _Rest:
    def __init__(self, options: argparse.Namespace) -> None:
        config = Configuration(load_configuration())
        address = options.jobmanager
        if address is None:
            host = config.get("rest.address") or "127.0.0.1"
            address = f"{host}:{config.get('rest.port') or 8081}"
        if "://" not in address:
            address = f"http://{address}"
        self.url = address.rstrip("/")
        self.config = config

    def call(self, path: str, method: str = "GET", body: dict | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                raw = response.read()
        except urllib.error.HTTPError as error:
            detail = _error_text(error)
            if error.code == 404 and "/jobs/" in path:
                raise _CommandError(f"The job was not found at {self.url}: {detail}") from None
            raise _CommandError(f"{method} {path} at {self.url} failed ({error.code}): {detail}") from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise _CommandError(
                f"Could not reach the cluster's REST API at {self.url} ({reason}); is the job's cluster running? "
                "Pass -m host:port, or set rest.address and rest.port"
            ) from None
        return json.loads(raw) if raw else None

    def wait_for_savepoint(self, job_id: str, request_id: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            answer = self.call(f"/jobs/{job_id}/savepoints/{request_id}")
            if answer["status"]["id"] == "COMPLETED":
                failure = (answer.get("operation") or {}).get("failure-cause")
                if failure is not None:
                    raise _CommandError(f"The savepoint of job {job_id} failed: {failure.get('stack-trace')}")
                return answer["operation"]["location"]
            time.sleep(_POLL_SECONDS)
        raise _CommandError(f"The savepoint of job {job_id} did not complete within {timeout:.0f} s (--timeout)")


def _error_text(error: urllib.error.HTTPError) -> str:
    try:
        errors = json.loads(error.read()).get("errors") or []
    except (ValueError, AttributeError, OSError):
        errors = []
    return "; ".join(str(e) for e in errors) or error.reason


def _run(handler):
    def command(options: argparse.Namespace) -> int:
        try:
            handler(_Rest(options), options)
        except _CommandError as error:
            print(f"flinklike {options.command}: {error}", file=sys.stderr)
            return 1
        return 0

    return command


# -- the verbs ----------------------------------------------------------------------------------------


def _job_line(job: dict) -> str:
    started = dt.datetime.fromtimestamp(job.get("start-time", 0) / 1000).strftime("%d.%m.%Y %H:%M:%S")
    return f"{started} : {job['jid']} : {job['name']} ({job['state']})"


@_run
def _list_command(rest: _Rest, options: argparse.Namespace) -> None:
    print("Waiting for response...")
    jobs = sorted(rest.call("/jobs/overview")["jobs"], key=lambda job: job.get("start-time", 0))
    running = [job for job in jobs if job["state"] in _RUNNING]
    scheduled = [job for job in jobs if job["state"] in _SCHEDULED]
    terminated = [job for job in jobs if job["state"] not in _RUNNING + _SCHEDULED]
    show_all = options.all or not (options.running or options.scheduled)
    sections = []
    if options.running or show_all:
        sections.append(("Running/Restarting Jobs", running, "No running jobs."))
    if options.scheduled or show_all:
        sections.append(("Scheduled Jobs", scheduled, "No scheduled jobs."))
    if options.all:
        sections.append(("Terminated Jobs", terminated, "No terminated jobs."))
    for title, listed, empty in sections:
        if not listed:
            print(empty)
            continue
        print(f" {title} ".center(62, "-"))
        for job in listed:
            print(_job_line(job))
        print("-" * 62)


@_run
def _cancel_command(rest: _Rest, options: argparse.Namespace) -> None:
    print(f"Cancelling job {options.job_id}.")
    rest.call(f"/jobs/{options.job_id}?mode=cancel", method="PATCH")
    print(f"Cancelled job {options.job_id}.")


@_run
def _savepoint_command(rest: _Rest, options: argparse.Namespace) -> None:
    print(f"Triggering savepoint for job {options.job_id}.")
    print("Waiting for response...")
    request = rest.call(f"/jobs/{options.job_id}/savepoints", method="POST", body={"cancel-job": False})
    location = rest.wait_for_savepoint(options.job_id, request["request-id"], options.timeout)
    print(f"Savepoint completed. Path: {_placed(rest, location, options.directory)}")
    print("You can resume your program from this savepoint with the run command.")


@_run
def _stop_command(rest: _Rest, options: argparse.Namespace) -> None:
    print(f'Suspending job "{options.job_id}" with a CANONICAL savepoint.')
    request = rest.call(f"/jobs/{options.job_id}/stop", method="POST", body={"drain": options.drain})
    location = rest.wait_for_savepoint(options.job_id, request["request-id"], options.timeout)
    print(f"Savepoint completed. Path: {_placed(rest, location, options.directory)}")


@_run
def _rescale_command(rest: _Rest, options: argparse.Namespace) -> None:
    path = f"/jobs/{options.job_id}/resource-requirements"
    requirements = rest.call(path)
    uppers = dict.fromkeys(requirements, options.parallelism)
    for entry in options.vertex:
        vertex, _, value = entry.partition("=")
        if vertex not in requirements or not value.isdigit():
            raise _CommandError(f"--vertex {entry!r}: expected VERTEX_ID=N with one of {sorted(requirements)}")
        uppers[vertex] = int(value)
    if None in uppers.values():
        raise _CommandError(f"give -p N, or --vertex for each of {sorted(requirements)}")
    body = {v: {"parallelism": {"lowerBound": 1, "upperBound": n}} for v, n in uppers.items()}
    earlier = rest.call(f"/jobs/{options.job_id}/rescales")
    before, failures = len(earlier["rescales"]), earlier["numFailures"]
    print(f"Rescaling job {options.job_id} to {uppers}.")
    rest.call(path, method="PUT", body=body)  # checked at once; a rescale it starts runs on (RESTARTING)
    deadline = time.monotonic() + options.timeout
    answer = rest.call(f"/jobs/{options.job_id}/rescales")
    while answer["state"] == "RESTARTING" and time.monotonic() < deadline:
        time.sleep(_POLL_SECONDS)
        answer = rest.call(f"/jobs/{options.job_id}/rescales")
    if answer["state"] == "RESTARTING":
        raise _CommandError(f"The rescale of job {options.job_id} did not complete within {options.timeout:.0f} s "
                            "(--timeout)")  # fmt: skip
    if len(answer["rescales"]) > before:
        done = answer["rescales"][-1]
        print(f"Rescaled job {options.job_id} to {done['parallelismAfter']} in {done['durationMs']} ms "
              f"(through checkpoint {done['checkpoint']}).")  # fmt: skip
    elif answer["state"] == "FINISHED":
        raise _CommandError(f"Job {options.job_id} ended before it was rescaled")
    elif answer["numFailures"] > failures:
        raise _CommandError(answer["lastFailure"])
    else:
        print(f"Job {options.job_id} keeps its parallelism: its bounds and the cluster's slots allow no other.")


def _placed(rest: _Rest, location: str, directory: str | None) -> str:
    """``location``, or the path of its copy in ``directory`` if that is another directory."""
    if directory is None or _within(location, directory):
        return location
    try:
        return copy_savepoint(location, directory, rest.config.storage, "The savepoint")
    except CheckpointStorageError as error:
        raise _CommandError(str(error)) from error


def _within(location: str, directory: str) -> bool:
    if "://" in location or "://" in directory:
        return location.rstrip("/").startswith(directory.rstrip("/") + "/")
    return os.path.commonpath([os.path.abspath(location), os.path.abspath(directory)]) == os.path.abspath(directory)
