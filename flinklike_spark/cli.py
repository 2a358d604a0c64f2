"""The ``flinklike`` command.

``flinklike run FILE.py [args...]`` runs a script as ``__main__`` with its
directory first on ``sys.path`` (as ``python FILE.py`` does);
``flinklike run package.module:function`` imports the module (the current
directory on ``sys.path``, as with ``python -m``) and calls the function
(which may return a StreamExecutionEnvironment to execute). Jobs the
program submits run on the embedded local cluster; while they run, progress
(records in/out per second, backpressure) is shown on stderr: one updating
line on a terminal, a line every few seconds otherwise.

``flinklike checkpoints DIR [--job JOB_ID]`` prints the completed checkpoints
and savepoints stored under a checkpoint directory (``execution.checkpointing.dir``,
any fsspec URL or local path), oldest first: job, id, kind, mode, completion
time, duration, alignment, state and channel-state sizes, operator count.

``flinklike inspect DIR --checkpoint N --operator UID [--job JOB_ID]
[--channel-state] [--limit N] [--format table|json]`` prints the stored rows of
one operator in one checkpoint: ``operator_state`` (subtask, key_group,
state_name, state_kind, key_repr, value_repr) or, with ``--channel-state``, the
in-flight buffers of ``channel_state`` (subtask, direction, gate, channel,
sequence, rows, payload_bytes). Pickled keys/values and buffer payloads are not
printed. Checkpoints whose commit failed before the completion row can be
inspected too. When no ``--job`` is given and the rows belong to several jobs
sharing the directory, a ``job_id`` column is added to the table.

Exit codes: 0 success (``checkpoints`` on a directory without any prints "no
completed checkpoints"); 1 the storage is unreachable or a checkpoint file is
corrupt; 2 a usage error, a directory that does not exist or holds no
checkpoint tables, or an unknown checkpoint id / operator uid (the message
names the bad value and lists the valid ones); 3 (``run``) a job of the
program was cancelled (from the dashboard, the REST API or the program) and
the program did not handle it: one line names who cancelled it and its last
completed checkpoint, no traceback. Errors go to stderr.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import logging
import math
import os
import runpy
import sys
import threading
import time

import pyarrow as pa

from checkpointing import inspect as cp_inspect
from checkpointing.layout import (
    CHANNEL_STATE,
    CHECKPOINTS,
    OPERATOR_STATE,
    STATE_TABLES,
    CheckpointLayout,
    check_job_id,
)
from flinklike_spark.cli_jobs import add_job_parsers
from flinklike_spark.config import ExecutionTarget
from flinklike_spark.datastream import StreamExecutionEnvironment
from flinklike_spark.errors import FlinklikeError, JobCancelledError
from flinklike_spark.job_client import INTERRUPTED_MESSAGE, JobClient
from flinklike_spark.job_client import log as job_client_log

__all__ = ["EXIT_CANCELLED", "EXIT_INTERRUPTED", "ProgressReporter", "main"]


class ProgressReporter:
    """Polls a JobClient's task metrics and prints throughput and backpressure.

    On a terminal one line is rewritten in place every ``interval`` seconds;
    otherwise a new line is written every ``interval`` seconds.
    """

    def __init__(self, client: JobClient, *, stream=None, interval: float | None = None) -> None:
        self._client = client
        self._stream = stream or sys.stderr
        self._tty = getattr(self._stream, "isatty", lambda: False)()
        if interval is not None and not (math.isfinite(interval) and interval > 0):
            raise ValueError(f"progress interval must be a number of seconds > 0, got {interval!r}")
        self._interval = interval if interval is not None else (1.0 if self._tty else 5.0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="progress", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5.0)
        if self._tty:
            self._stream.write("\n")

    @staticmethod
    def summarize(metrics: dict[str, dict[str, float]]) -> tuple[float, float, float]:
        """(records in, records out, fraction of task time backpressured) over all tasks."""
        records_in = sum(m.get("records_in", 0) for m in metrics.values())
        records_out = sum(m.get("records_out", 0) for m in metrics.values())
        uptime = sum(m.get("uptime_seconds", 0) for m in metrics.values()) or 1.0
        backpressured = sum(m.get("backpressured_seconds", 0) for m in metrics.values()) / uptime
        return records_in, records_out, backpressured

    def _report_failures(self, seen: int) -> int:
        """Print every failure not printed yet (one line each, also on a terminal); return how many there are."""
        history = self._client.get_exception_history()
        for entry in history[seen:]:
            first = str(entry.root_cause).splitlines()[0] if str(entry.root_cause) else type(entry.root_cause).__name__
            what = f"restarting {len(entry.restarted)} tasks" if entry.will_restart else "not restarting"
            line = f"job {self._client.job_id[:8]} {entry.task or 'global failure'} failed: {first}; {what}"
            self._stream.write(("\r\033[K" + line + "\n") if self._tty else line + "\n")
        return len(history)

    def _run(self) -> None:
        last_in, last_out, last_time = 0.0, 0.0, time.monotonic()
        failures = 0
        while not self._stop.wait(self._interval) and not self._client.done():
            try:
                failures = self._report_failures(failures)
                records_in, records_out, backpressured = self.summarize(self._client.task_metrics())
            except Exception:  # noqa: BLE001 - progress is best effort
                continue
            status = self._client.get_job_status()
            if status.is_globally_terminal:  # its tasks are gone: nothing left to report a rate of
                break
            now = time.monotonic()
            elapsed = max(now - last_time, 1e-9)
            # Counters restart with restarted tasks: a drop is not a negative rate.
            rate_in = max(records_in - last_in, 0.0) / elapsed
            rate_out = max(records_out - last_out, 0.0) / elapsed
            last_in, last_out, last_time = records_in, records_out, now
            line = (
                f"job {self._client.job_id[:8]} {status.name}: "
                f"in {records_in:,.0f} ({rate_in:,.0f}/s), out {records_out:,.0f} ({rate_out:,.0f}/s), "
                f"backpressured {backpressured:.0%}, restarts {self._client.num_restarts}"
            )
            self._stream.write("\r\033[K" + line if self._tty else line + "\n")
            self._stream.flush()


def _run_target(target: str, args: list[str]) -> None:
    """Run ``target`` as ``python FILE.py`` or ``python -m`` would see it.

    A script's directory goes first on ``sys.path`` (so its local imports work,
    also in the TaskExecutor processes, which inherit ``sys.path``); for
    ``module:function`` the current directory does, as with ``python -m``.
    """
    if target.endswith(".py") or ":" not in target:
        if not os.path.isfile(target):
            raise _UsageError(f"no such file: {target!r} (give a Python file, e.g. my_job.py, or module:function)")
        sys.argv = [target, *args]
        sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
        runpy.run_path(target, run_name="__main__")
        return
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    module_name, _, function_name = target.partition(":")
    try:
        module = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        module = None
    if module is None:
        raise _UsageError(f"no module {module_name!r} on the path (target {target!r}, form module:function)")
    function = getattr(importlib.import_module(module_name), function_name, None)
    if not callable(function):
        what = (
            "has no attribute"
            if function is None
            else f"has {type(function).__name__} {function_name!r}, not a function,"
        )
        raise _UsageError(
            f"module {module_name!r} {what} {function_name!r} to run (target {target!r}, form module:function)"
        )
    result = function(*args)
    if isinstance(result, StreamExecutionEnvironment):
        result.execute(function_name)


#: ``flinklike run``'s exit status when a job was cancelled and the program let JobCancelledError through.
EXIT_CANCELLED = 3

#: ``flinklike run``'s exit status after Ctrl-C (a shell's 128 + SIGINT).
EXIT_INTERRUPTED = 130


class _DropInterruptLine(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != INTERRUPTED_MESSAGE


class _UsageError(Exception):
    """A bad argument the parser cannot see (missing directory, unknown id or uid): exit 2."""


# --- flinklike run -------------------------------------------------------------------------


def _run_command(options: argparse.Namespace) -> int:
    reporters: list[ProgressReporter] = []

    clients: list[JobClient] = []

    def on_submit(client: JobClient) -> None:
        clients.append(client)
        if client.web_interface_url:
            print(f"job {client.job_id} submitted; dashboard and REST API: {client.web_interface_url}",
                  file=sys.stderr, flush=True)  # fmt: skip
        if options.no_progress:
            return
        reporter = ProgressReporter(client, interval=options.progress_interval)
        reporters.append(reporter)
        reporter.start()

    StreamExecutionEnvironment.context_job_listeners.append(on_submit)
    if options.execution_target is not None:
        StreamExecutionEnvironment.context_configuration["execution.target"] = options.execution_target
    # Ctrl-C prints one line, here (the job client's own line and Python's traceback are left out).
    quiet = _DropInterruptLine()
    job_client_log.addFilter(quiet)
    try:
        _run_target(options.target, options.args)
    except KeyboardInterrupt:
        for reporter in reporters:
            reporter.stop()
        reporters.clear()
        jobs = ", ".join(f"job {c.job_id} {c.get_job_status().name}" for c in clients) or "no job was submitted"
        print(f"flinklike run: interrupted (Ctrl-C); {jobs}", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    finally:
        job_client_log.removeFilter(quiet)
        StreamExecutionEnvironment.context_configuration.pop("execution.target", None)
        for reporter in reporters:
            reporter.stop()
        StreamExecutionEnvironment.context_job_listeners.remove(on_submit)
    return 0


# --- flinklike checkpoints / inspect ------------------------------------------------------

_TABLES = (CHECKPOINTS, *STATE_TABLES)


def _open_directory(url: str) -> CheckpointLayout:
    """The layout of ``url``; raises _UsageError unless it is a directory that is empty
    or holds at least one checkpoint table."""
    layout = CheckpointLayout(base_url=url)
    fs, root = layout.filesystem()
    if not fs.isdir(root):
        reason = "is not a directory" if fs.exists(root) else "does not exist"
        raise _UsageError(f"checkpoint directory {url!r} {reason}")
    if fs.ls(root) and not any(fs.isdir(layout.table_path(t)) for t in _TABLES):
        raise _UsageError(
            f"{url!r} holds no checkpoint tables ({', '.join(t + '/' for t in _TABLES)}); "
            f"pass the execution.checkpointing.dir of a job"
        )
    return layout


def _job_ids(layout: CheckpointLayout) -> list[str]:
    return sorted({c.job_id for c in cp_inspect.stored_checkpoints(layout)})


def _checkpoints_command(options: argparse.Namespace) -> int:
    layout = _open_directory(options.dir)
    history = cp_inspect.list_checkpoints(layout, options.job)
    print(cp_inspect.format_history(history))
    if history.num_rows == 0 and options.job is not None and (jobs := _job_ids(layout)):
        print(f"(of job {options.job!r}; jobs in {options.dir!r}: {', '.join(jobs)})", file=sys.stderr)
    return 0


def _describe_ids(stored: list[cp_inspect.StoredCheckpoint]) -> str:
    """``1, 2, 3`` for one job, ``1, 2 (job a); 7 (job b)`` for several; partial commits marked."""
    by_job: dict[str, list[str]] = {}
    for c in stored:
        label = str(c.checkpoint_id) if c.completed else f"{c.checkpoint_id} (not completed)"
        by_job.setdefault(c.job_id, []).append(label)
    if len(by_job) == 1:
        return ", ".join(next(iter(by_job.values())))
    return "; ".join(f"{', '.join(ids)} (job {job})" for job, ids in by_job.items())


def _missing_checkpoint(layout: CheckpointLayout, options: argparse.Namespace) -> str | None:
    """Why ``--checkpoint`` (of ``--job``) names nothing stored, or None if it exists."""
    stored = cp_inspect.stored_checkpoints(layout, options.job)
    if any(c.checkpoint_id == options.checkpoint for c in stored):
        return None
    what = f"checkpoint {options.checkpoint}" + ("" if options.job is None else f" of job {options.job!r}")
    if stored:
        return f"{what} not found in {options.dir!r}; existing checkpoint ids: {_describe_ids(stored)}"
    if options.job is None:
        return f"{what} not found: {options.dir!r} holds no checkpoints"
    jobs = _job_ids(layout)
    there = f"; job ids there: {', '.join(jobs)}" if jobs else ""
    return f"{what} not found: {options.dir!r} holds no checkpoints of job {options.job!r}{there}"


def _missing_operator(layout: CheckpointLayout, options: argparse.Namespace, table: str) -> str:
    uids = cp_inspect.operator_uids(layout, table, options.checkpoint, job_id=options.job)
    present = ", ".join(uids) if uids else "none"
    if table == CHANNEL_STATE and not uids:
        present += " (aligned checkpoints and savepoints persist no in-flight data)"
    return (
        f"operator {options.operator!r} has no {table} rows in checkpoint {options.checkpoint}; "
        f"operators with {table} rows there: {present}"
    )


def _display_table(rows: pa.Table, fmt: str) -> pa.Table:
    """Drop binary columns; for text also the columns fixed by the arguments, and
    ``job_id`` unless the rows span several jobs (JSON keeps every other column)."""
    binary = (pa.types.is_binary, pa.types.is_large_binary)
    keep = [f.name for f in rows.schema if not any(is_binary(f.type) for is_binary in binary)]
    if fmt == "table":
        constant = {"checkpoint_id", "operator_uid"}
        if len(set(rows["job_id"].to_pylist())) <= 1:
            constant.add("job_id")
        keep = [name for name in keep if name not in constant]
    return rows.select(keep)


def _render(rows: pa.Table, fmt: str) -> str:
    if fmt == "table":
        return cp_inspect.format_rows(rows)
    lines = ",\n".join(json.dumps(row, default=str) for row in rows.to_pylist())
    return f"[\n{lines}\n]"


def _inspect_command(options: argparse.Namespace) -> int:
    layout = _open_directory(options.dir)
    if (reason := _missing_checkpoint(layout, options)) is not None:
        raise _UsageError(reason)
    table = CHANNEL_STATE if options.channel_state else OPERATOR_STATE
    read = cp_inspect.channel_state if options.channel_state else cp_inspect.operator_state
    rows = read(layout, options.checkpoint, options.operator, job_id=options.job)
    if rows.num_rows == 0:
        raise _UsageError(_missing_operator(layout, options, table))
    total = rows.num_rows
    if options.limit is not None and total > options.limit:
        rows = rows.slice(0, options.limit)
        print(f"(showing {options.limit} of {total} rows)", file=sys.stderr)
    print(_render(_display_table(rows, options.format), options.format))
    return 0


# --- argument parsing ---------------------------------------------------------------------


def _job_id(value: str) -> str:
    try:
        check_job_id(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def _int_at_least(minimum: int):
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            number = minimum - 1
        if number < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value!r}")
        return number

    parse.__name__ = f"integer >= {minimum}"
    return parse


def _positive_seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {value!r}")
    return seconds


def _add_run_parser(commands) -> None:
    run = commands.add_parser("run", help="run a pipeline (on the embedded local cluster, or on Spark executors)")
    run.add_argument("target", help="a script FILE.py or package.module:function")
    run.add_argument(
        "--target",
        "-t",
        dest="execution_target",
        choices=[t.value for t in ExecutionTarget],
        default=None,
        help="where jobs run (execution.target): local (embedded cluster, the default) or spark (TaskExecutors "
        "on the executors of the program's SparkSession, JobMaster in this driver)",
    )
    run.add_argument(
        "--no-progress",
        action="store_true",
        help="do not show live progress (a line per job: its status; 'in' and 'out': the records all its tasks "
        "received and emitted, summed over every operator, so a record counts once per operator it passes; "
        "the share of task time backpressured; the restarts)",
    )
    run.add_argument(
        "--progress-interval",
        type=_positive_seconds,
        default=None,
        metavar="SECONDS",
        help="seconds between progress reports (default: 1 on a terminal, 5 otherwise)",
    )
    run.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the program")
    run.epilog = (
        f"Exit status: 0 when the program ends normally; {EXIT_CANCELLED} when a job it ran was cancelled "
        "(dashboard, REST API, or the program) and the program did not catch JobCancelledError: one line on "
        "stderr names who cancelled it and its last completed checkpoint; 2 for a bad target. Other errors of "
        "the program end with its traceback and status 1; Ctrl-C cancels the running jobs, stops the local cluster and "
        f"ends with one line and status {EXIT_INTERRUPTED}."
    )
    run.set_defaults(handler=_run_command)


def _add_directory_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", help="checkpoint directory (execution.checkpointing.dir): local path or fsspec URL")
    parser.add_argument("--job", type=_job_id, metavar="JOB_ID", help="only this job (default: every job in DIR)")


def _add_checkpoints_parser(commands) -> None:
    checkpoints = commands.add_parser(
        "checkpoints",
        help="list the completed checkpoints and savepoints in a checkpoint directory",
        description="Print the checkpoint history of DIR, oldest first: job, id, kind, mode, completion time, "
        "duration, alignment time, state and channel-state sizes. Prints 'no completed checkpoints' when "
        "there are none; exits 2 when DIR does not exist or holds no checkpoint tables.",
    )
    _add_directory_arguments(checkpoints)
    checkpoints.set_defaults(handler=_checkpoints_command)


def _add_inspect_parser(commands) -> None:
    inspect = commands.add_parser(
        "inspect",
        help="print the stored state rows of one operator in one checkpoint",
        description="Print the operator_state rows (subtask, key_group, state_name, state_kind, key_repr, "
        "value_repr) of operator UID in checkpoint N, or with --channel-state its channel_state rows "
        "(subtask, direction, gate, channel, sequence, rows, payload_bytes). Without --job, rows of every "
        "job with that checkpoint id are shown, with a job_id column when they span several jobs. An "
        "unknown checkpoint id or uid exits 2 and lists the valid ones.",
    )
    _add_directory_arguments(inspect)
    inspect.add_argument("--checkpoint", required=True, type=_int_at_least(0), metavar="N", help="checkpoint id")
    inspect.add_argument("--operator", required=True, metavar="UID", help="operator uid (as set with .uid())")
    inspect.add_argument(
        "--channel-state", action="store_true", help="show in-flight buffers (channel_state) instead of state"
    )
    inspect.add_argument(
        "--limit",
        type=_int_at_least(1),
        metavar="N",
        help="print at most N rows (a note with the total goes to stderr)",
    )
    inspect.add_argument(
        "--format",
        choices=["table", "json"],
        default="table",
        help="fixed-width table (default) or a JSON array of row objects with every non-binary column",
    )
    inspect.set_defaults(handler=_inspect_command)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="flinklike", description="flinklike-spark command line")
    parser.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    commands = parser.add_subparsers(dest="command", required=True)
    _add_run_parser(commands)
    _add_checkpoints_parser(commands)
    _add_inspect_parser(commands)
    add_job_parsers(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    options = _build_parser().parse_args(argv)
    logging.basicConfig(level=options.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Errors of the user's program (flinklike run) keep their traceback; only usage errors are reported.
    reported = (_UsageError,) if options.command == "run" else (_UsageError, FlinklikeError)
    try:
        return options.handler(options)
    except JobCancelledError as exc:
        if options.command != "run":
            raise
        # Cancelling is an outcome, not a crash: one line, no traceback.
        last = exc.last_checkpoint or "none"
        print(
            f"flinklike run: job {exc.job_id} was cancelled by {exc.cancelled_by or 'an unknown request'}; "
            f"last completed checkpoint: {last}",
            file=sys.stderr,
        )
        return EXIT_CANCELLED
    except reported as exc:
        if isinstance(exc, _UsageError):
            print(f"flinklike {options.command}: error: {exc}", file=sys.stderr)
            return 2
        print(f"flinklike {options.command}: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
