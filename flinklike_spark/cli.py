"""The ``flinklike`` command.

``flinklike run FILE.py [args...]`` runs a script as ``__main__``;
``flinklike run package.module:function`` imports the module and calls the
function (which may return a StreamExecutionEnvironment to execute). Jobs the
program submits run on the embedded local cluster; while they run, progress
(records in/out per second, backpressure) is shown on stderr: one updating
line on a terminal, a line every few seconds otherwise.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import runpy
import sys
import threading
import time

from flinklike_spark.datastream import StreamExecutionEnvironment
from flinklike_spark.job_client import JobClient

__all__ = ["ProgressReporter", "main"]


class ProgressReporter:
    """Polls a JobClient's task metrics and prints throughput and backpressure.

    On a terminal one line is rewritten in place every ``interval`` seconds;
    otherwise a new line is written every ``interval`` seconds.
    """

    def __init__(self, client: JobClient, *, stream=None, interval: float | None = None) -> None:
        self._client = client
        self._stream = stream or sys.stderr
        self._tty = getattr(self._stream, "isatty", lambda: False)()
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

    def _run(self) -> None:
        last_in, last_out, last_time = 0.0, 0.0, time.monotonic()
        while not self._stop.wait(self._interval) and not self._client.done():
            try:
                records_in, records_out, backpressured = self.summarize(self._client.task_metrics())
            except Exception:  # noqa: BLE001 - progress is best effort
                continue
            now = time.monotonic()
            elapsed = max(now - last_time, 1e-9)
            rate_in, rate_out = (records_in - last_in) / elapsed, (records_out - last_out) / elapsed
            last_in, last_out, last_time = records_in, records_out, now
            line = (
                f"job {self._client.job_id[:8]} {self._client.get_job_status().name}: "
                f"in {records_in:,.0f} ({rate_in:,.0f}/s), out {records_out:,.0f} ({rate_out:,.0f}/s), "
                f"backpressured {backpressured:.0%}"
            )
            self._stream.write("\r\033[K" + line if self._tty else line + "\n")
            self._stream.flush()


def _run_target(target: str, args: list[str]) -> None:
    if target.endswith(".py") or ":" not in target:
        sys.argv = [target, *args]
        runpy.run_path(target, run_name="__main__")
        return
    module_name, _, function_name = target.partition(":")
    function = getattr(importlib.import_module(module_name), function_name)
    result = function(*args)
    if isinstance(result, StreamExecutionEnvironment):
        result.execute(function_name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="flinklike", description="flinklike-spark command line")
    parser.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run a pipeline on the embedded local cluster")
    run.add_argument("target", help="a script FILE.py or package.module:function")
    run.add_argument("--no-progress", action="store_true", help="do not show live progress")
    run.add_argument(
        "--progress-interval", type=float, default=None, metavar="SECONDS",
        help="seconds between progress reports (default: 1 on a terminal, 5 otherwise)",
    )
    run.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the program")
    options = parser.parse_args(argv)
    logging.basicConfig(level=options.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    if options.command == "run":
        reporters: list[ProgressReporter] = []
        if not options.no_progress:

            def on_submit(client: JobClient) -> None:
                reporter = ProgressReporter(client, interval=options.progress_interval)
                reporters.append(reporter)
                reporter.start()

            StreamExecutionEnvironment.context_job_listeners.append(on_submit)
        try:
            _run_target(options.target, options.args)
        finally:
            for reporter in reporters:
                reporter.stop()
            if not options.no_progress:
                StreamExecutionEnvironment.context_job_listeners.remove(on_submit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
