"""The ``flinklike`` command runs a pipeline file and reports live progress."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

PIPELINE = textwrap.dedent(
    """
    from connectors import CollectSink, SequenceSource
    from flinklike_spark import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment({"parallelism.default": 2})
    source = SequenceSource(num_keys=4, records_per_key=5_000, rows_per_second=8_000)
    env.from_source(source, name="slow").key_by("key").map(lambda r: r).sink_to(CollectSink("out"))
    result = env.execute("cli job")
    print("rows", len(CollectSink.rows(result)))
    """
)

MODULE = textwrap.dedent(
    """
    from connectors import PrintSink, SequenceSource
    from flinklike_spark import StreamExecutionEnvironment


    def job():
        env = StreamExecutionEnvironment.get_execution_environment()
        env.from_source(SequenceSource(num_keys=2, records_per_key=3), name="tiny").sink_to(PrintSink())
        return env
    """
)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "flinklike_spark.cli", *args], capture_output=True, text=True, timeout=100
    )


def test_run_file_shows_progress_and_program_output(tmp_path):
    script = tmp_path / "pipeline.py"
    script.write_text(PIPELINE)
    done = run_cli("run", "--progress-interval", "0.5", str(script))
    assert done.returncode == 0, done.stderr
    assert "rows 20000" in done.stdout
    progress = [line for line in done.stderr.splitlines() if "backpressured" in line]
    assert progress, f"no progress lines on stderr:\n{done.stderr}"
    assert "RUNNING" in progress[-1] and "/s)" in progress[-1]
    assert re.search(r"job [0-9a-f]{32} submitted; dashboard and REST API: http://127\.0\.0\.1:\d+", done.stderr), (
        done.stderr
    )


def test_run_module_function_and_bad_target(tmp_path, monkeypatch):
    (tmp_path / "my_jobs.py").write_text(MODULE)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    done = run_cli("run", "--no-progress", "my_jobs:job")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("'seq'") == 6, done.stdout
    missing = run_cli("run", "no_such_module:job")
    assert missing.returncode != 0
    assert "no_such_module" in missing.stderr


def test_run_file_can_import_modules_next_to_it(tmp_path):
    # `python job.py` puts job.py's directory on sys.path; `flinklike run job.py` must too,
    # and the TaskExecutor processes must import the helper the map function lives in.
    (tmp_path / "local_helpers.py").write_text(
        "def double(row):\n    return {'key': row['key'], 'seq': 2 * row['seq']}\n"
    )
    (tmp_path / "job.py").write_text(
        textwrap.dedent(
            """
            from connectors import CollectSink, SequenceSource
            from flinklike_spark import StreamExecutionEnvironment
            from local_helpers import double

            env = StreamExecutionEnvironment.get_execution_environment()
            env.from_source(SequenceSource(num_keys=1, records_per_key=4)).map(double).sink_to(CollectSink("out"))
            print("seqs", sorted(row["seq"] for row in CollectSink.rows(env.execute("local imports"))))
            """
        )
    )
    done = run_cli("run", "--no-progress", str(tmp_path / "job.py"))
    assert done.returncode == 0, done.stderr
    assert "seqs [0, 2, 4, 6]" in done.stdout


@pytest.mark.parametrize("interval", ["0", "-1", "nan", "inf", "soon"])
def test_run_rejects_a_progress_interval_that_is_not_positive(tmp_path, interval):
    script = tmp_path / "never_run.py"
    script.write_text("raise SystemExit('the script must not run')\n")
    done = run_cli("run", f"--progress-interval={interval}", str(script))
    assert done.returncode == 2, done.stderr
    assert "--progress-interval" in done.stderr
    assert f"expected a number of seconds > 0, got {interval!r}" in done.stderr
    assert "must not run" not in done.stderr


TARGETED = textwrap.dedent(
    """
    from connectors import CollectSink, SequenceSource
    from flinklike_spark import StreamExecutionEnvironment

    print("context", StreamExecutionEnvironment.context_configuration)
    env = StreamExecutionEnvironment.get_execution_environment({"execution.target": "local"})
    env.from_source(SequenceSource(num_keys=2, records_per_key=3), name="tiny").sink_to(CollectSink("out"))
    print("rows", len(CollectSink.rows(env.execute("local anyway"))))
    """
)


def test_run_target_sets_execution_target_unless_the_program_sets_it(tmp_path):
    script = tmp_path / "targeted.py"
    script.write_text(TARGETED)
    done = run_cli("run", "--no-progress", "--target", "spark", str(script))
    assert done.returncode == 0, done.stderr
    assert "context {'execution.target': 'spark'}" in done.stdout
    assert "rows 6" in done.stdout  # the program's own execution.target (local) wins: no Spark was started
    bad = run_cli("run", "--target", "yarn", str(script))
    assert bad.returncode == 2 and "invalid choice: 'yarn' (choose from 'local', 'spark')" in bad.stderr, bad.stderr


UNBOUNDED = textwrap.dedent(
    """
    import sys
    from connectors import CollectSink, SequenceSource
    from flinklike_spark import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment({
        "execution.checkpointing.interval": "200 ms",
        "execution.checkpointing.dir": sys.argv[1],
    })
    source = SequenceSource(num_keys=2, records_per_key=10_000_000, rows_per_second=200)
    env.from_source(source, name="endless").sink_to(CollectSink("out"))
    env.execute("until cancelled")
    """
)


def test_run_of_a_job_cancelled_over_rest_prints_one_line_and_exits_3(tmp_path):
    """The dashboard's Cancel button (PATCH /jobs/<id>?mode=cancel) ends `flinklike run` with one line
    naming who cancelled and the last checkpoint, and exit status 3, not a JobCancelledError traceback."""
    from tests.support.rest_helpers import get, request, wait_for

    script = tmp_path / "endless.py"
    script.write_text(UNBOUNDED)
    process = subprocess.Popen(
        [sys.executable, "-m", "flinklike_spark.cli", "run", "--no-progress", str(script), str(tmp_path / "ck")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        line = process.stderr.readline()  # the first line names the job and the REST API
        submitted = re.search(r"job ([0-9a-f]{32}) submitted; dashboard and REST API: (http://\S+)", line)
        assert submitted, line
        job_id, base = submitted.groups()
        wait_for(
            "a completed checkpoint",
            lambda: get(f"{base}/jobs/{job_id}/checkpoints")["counts"]["completed"] >= 1,
            timeout=60,
        )
        status, _ = request(f"{base}/jobs/{job_id}?mode=cancel", "PATCH")
        assert status == 202
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 3, stderr  # flinklike_spark.cli.EXIT_CANCELLED
    assert "Traceback" not in stderr, stderr
    lines = [ln for ln in stderr.splitlines() if ln.startswith("flinklike run:")]
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"flinklike run: job {job_id} was cancelled by a REST request (PATCH /jobs/{job_id}"), (
        lines
    )
    assert re.search(rf"last completed checkpoint: {re.escape(str(tmp_path / 'ck'))}/{job_id}/chk-\d+$", lines[0]), (
        lines
    )


def test_run_help_documents_the_exit_status_of_a_cancelled_job():
    done = run_cli("run", "--help")
    assert done.returncode == 0
    assert "3 when a job it ran was cancelled" in " ".join(done.stdout.split())
