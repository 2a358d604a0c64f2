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
    """Polls a JobClient's task metrics and prints throughput and backpressure."""

    def __init__(self, client: JobClient, *, stream=None, interval: float = 1.0) -> None:
        self._client = client
        self._stream = stream or sys.stderr
        self._interval = interval
        self._tty = getattr(self._stream, "isatty", lambda: False)()
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
        last_in, last_time, last_print = 0.0, time.monotonic(), 0.0
        while not self._stop.wait(self._interval) and not self._client.done():
            try:
                records_in, _, backpressured = self.summarize(self._client.task_metrics())
            except Exception:  # noqa: BLE001 - progress is best effort
                continue
            now = time.monotonic()
            rate = (records_in - last_in) / max(now - last_time, 1e-9)
            last_in, last_time = records_in, now
            line = (
                f"job {self._client.job_id[:8]} {self._client.get_job_status().name}: "
                f"{records_in:,.0f} records in ({rate:,.0f}/s), backpressured {backpressured:.0%}"
            )
            if self._tty:
                self._stream.write("\r\033[K" + line)
                self._stream.flush()
            elif now - last_print >= 5 * self._interval:
                self._stream.write(line + "\n")
                last_print = now


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
    run.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the program")
    options = parser.parse_args(argv)
    logging.basicConfig(level=options.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    if options.command == "run":
        reporters: list[ProgressReporter] = []
        if not options.no_progress:

            def on_submit(client: JobClient) -> None:
                reporter = ProgressReporter(client)
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
