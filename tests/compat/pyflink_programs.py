"""PyFlink programs written for this suite (``programs/``) and their output recorded on real PyFlink 2.3.

Each program is a small complete PyFlink program (``from pyflink...`` imports, PyFlink's idiom) that
prints its result deterministically. ``programs/expected/<name>.out`` is its standard output as recorded
by running it on PyFlink 2.3.0 (``record_pyflink_outputs.py``); the compatibility tests run it here with
only its import prefix changed and compare. :data:`PROGRAMS` says, per program, what it covers, how the
output is compared, and (``differs``) why our output is known to differ from PyFlink's.

PyFlink runs from the benchmarks' peer venv (``benchmarks/compare/peers.py``: apache-flink 2.3.0 and
find_libpython), with its python first on PATH, as PyFlink's local cluster needs; Java must be installed.

``programs/expected/verified.json`` records, per program, the digest of what decides its recorded output
(:func:`recording_digest`: the program, its Java twin, the recording and the pinned PyFlink packages) as
it was when ``record_pyflink_outputs`` last saw real PyFlink print exactly that recording. Like a build
system's test cache keyed on its inputs, the suite re-runs real PyFlink only for a program whose digest
differs (``FLINKLIKE_PYFLINK_RECHECK=all`` re-runs every one).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Literal

from tests.compat.pyflink_sources import with_imports_changed

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS_DIR = Path(__file__).with_name("programs")
EXPECTED_DIR = PROGRAMS_DIR / "expected"
VERIFIED_PATH = EXPECTED_DIR / "verified.json"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Program:
    """One program of ``programs/``.

    Attributes:
        covers: what of PyFlink it exercises (issue 20's themes).
        order: ``exact`` compares the output line by line; ``lines-any-order`` compares the sorted lines
            (for programs whose lines PyFlink prints in no fixed order).
        differs: empty when our output must equal PyFlink's; else why it is known to differ (the test is
            then a strict xfail: it fails once the difference is gone, so that this is updated).
        java_twin: for a feature PyFlink 2.3 lacks, a Java program in ``programs/java/`` doing the same
            on Flink 2.3's own runtime (the wheel's jars) and printing the same lines: the expected output
            is recorded from it instead.
    """

    covers: str
    order: Literal["exact", "lines-any-order"] = "exact"
    differs: str = ""
    java_twin: str = ""


PROGRAMS: dict[str, Program] = {
    "async_retry": Program(
        covers="theme 5: AsyncRetryStrategy.fixed_delay / exponential_backoff, async_retry_predicates, "
        "AsyncDataStream.unordered_wait_with_retry / ordered_wait_with_retry",
    ),
    "metrics": Program(
        covers="theme 5: RuntimeContext.get_metrics_group(): add_group, counter inc/dec/get_count, meter "
        "mark_event/get_count, distribution update, gauge",
    ),
    "side_outputs": Program(
        covers="theme 1: OutputTag with a TypeInformation (Types.ROW, Types.TUPLE), ProcessFunction.Context, "
        "KeyedProcessFunction.Context; theme 2: side-output Rows named f0, f1",
    ),
    "key_selectors": Program(covers="theme 1: KeySelector classes as key_by arguments, on tuples and Rows"),
    "state_descriptors": Program(
        covers="theme 1: Value/List/Map/Reducing/AggregatingStateDescriptor in PyFlink's argument order; "
        "KeyedProcessFunction.Context / OnTimerContext annotations; event-time timers",
    ),
    "generic_window_functions": Program(
        covers="theme 1: ProcessWindowFunction[tuple, tuple, str, TimeWindow], ProcessWindowFunction.Context"
        "[TimeWindow], WindowFunction[...], ProcessAllWindowFunction[...], AllWindowFunction[...]; window "
        "reduce / aggregate with a window function",
    ),
    "broadcast_contexts": Program(
        covers="theme 1: BroadcastProcessFunction[...] with ReadOnlyContext / Context, "
        "KeyedBroadcastProcessFunction[...] with ReadOnlyContext / Context / OnTimerContext",
    ),
    "records": Program(
        covers="theme 2: Types.ROW rows f0.. (str, attributes, as_dict), ROW_NAMED from Rows and tuples, "
        "nested ROW and TUPLE, pickled plain values and objects of user classes (also as keyed state)",
    ),
    "big_dec": Program(covers="theme 2: BIG_DEC values and their scale"),
    "undeclared_values": Program(
        covers="issue 30 item 1: values without a declared type pass unchanged: plain ints into CoMap / "
        "CoFlatMap (also with a second consumer), keyed and broadcast connects, positional and named Rows, "
        "tuples of mixed lengths, untyped side outputs, windows, keyed reduce",
    ),
    "declared_records": Program(
        covers="issue 30 item 1: Types.TUPLE streams collect as tuples from every operator; "
        "Types.PICKLED_BYTE_ARRAY() as a stream's, a side output's and a state's type",
    ),
    "print_records": Program(
        covers="issue 30 item 1: print() of undeclared records, Types.ROW / ROW_NAMED / TUPLE and basic values",
        order="lines-any-order",
    ),
    "checkpointing_without_dir": Program(
        covers="issue 30 item 3: env.enable_checkpointing(ms) without a checkpoint directory (jobmanager "
        "checkpoint storage), CheckpointConfig getters",
    ),
    "checkpoints_after_tasks_finish": Program(
        covers="issue 30 item 4: checkpoints after tasks finished (FLIP-147): a finished source does not stop "
        "checkpoints, so checkpointed execute_and_collect results arrive while the job runs; the final checkpoint",
    ),
    "pyflink_test_ports": Program(
        covers="issue 40 item 7: PyFlink's own tests ported: keyed execute_and_collect yields Row(f0=key, "
        "f1=record); from_collection wraps BYTE/SHORT/INT values around as Java does; the checkpointing mode "
        "while checkpointing is off",
    ),
    "keyed_aggregations": Program(
        covers="theme 3: keyed sum / min / max / min_by / max_by on tuples by position, on Rows by name and "
        "position, on plain numbers",
    ),
    "env_and_stream_api": Program(
        covers="theme 4: environment getters, stream names, get_execution_plan, execute_async and "
        "get_job_execution_result().result(), add_python_file, KeyedStream repartitioning raising, a job "
        "without a sink, keyed and non-keyed streams connected then keyed",
    ),
    "batch_mode": Program(covers="theme 4: set_runtime_mode(RuntimeExecutionMode.BATCH) on bounded input"),
    "evictors": Program(
        covers="theme 5: CountEvictor, TimeEvictor, DeltaEvictor, before and after the window function "
        "(PyFlink 2.3 has no evictors: recorded from Flink 2.3's Java API)",
        java_twin="Evictors.java",
    ),
    "apply_to_keyed_state": Program(
        covers="theme 5: KeyedBroadcastProcessFunction.Context.apply_to_keyed_state (PyFlink 2.3 has none: "
        "recorded from Flink 2.3's Java API)",
        java_twin="ApplyToKeyedState.java",
    ),
}


def program_path(name: str) -> Path:
    return PROGRAMS_DIR / f"{name}.py"


def expected_path(name: str) -> Path:
    return EXPECTED_DIR / f"{name}.out"


def recording_digest(name: str) -> str:
    """sha256 of what decides program ``name``'s recorded output: its source, its Java twin (if any), the
    recording itself, and the PyFlink venv's pinned packages."""
    parts = [
        "\n".join(_peers().PEERS["pyflink"].packages).encode(),
        program_path(name).read_bytes(),
        expected_path(name).read_bytes(),
    ]
    if PROGRAMS[name].java_twin:
        parts.append((PROGRAMS_DIR / "java" / PROGRAMS[name].java_twin).read_bytes())
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "big") + part)
    return digest.hexdigest()


def verified_digests() -> dict[str, str]:
    """``verified.json``: program -> the digest its recording had when real PyFlink last printed it."""
    return json.loads(VERIFIED_PATH.read_text()) if VERIFIED_PATH.exists() else {}


def record_verified(names: list[str]) -> None:
    """Record that real PyFlink just printed ``names``' recordings (``record_pyflink_outputs`` calls this)."""
    verified = {name: digest for name, digest in verified_digests().items() if name in PROGRAMS}
    verified.update({name: recording_digest(name) for name in names})
    VERIFIED_PATH.write_text(json.dumps(dict(sorted(verified.items())), indent=1) + "\n")


def comparable(name: str, output: str) -> list[str]:
    """``output``'s lines as :data:`PROGRAMS` says ``name``'s are compared."""
    lines = output.splitlines()
    return sorted(lines) if PROGRAMS[name].order == "lines-any-order" else lines


def _run(argv: list[str], env: dict[str, str], cwd: Path, timeout: float) -> str:
    """The program's standard output; RuntimeError with the end of its stderr when it fails."""
    done = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited with {done.returncode}:\n{done.stderr[-3000:]}")
    return done.stdout


def run_here(name: str, workdir: Path, *, timeout: float = 240) -> str:
    """Run program ``name`` on flinklike_spark (imports changed from ``pyflink`` only); its stdout."""
    program = workdir / f"{name}.py"
    program.write_text(with_imports_changed(program_path(name).read_text()))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    return _run([sys.executable, str(program)], env, workdir, timeout)


def _peers():
    sys.path.insert(0, str(ROOT / "benchmarks" / "compare"))
    try:
        import peers
    finally:
        sys.path.pop(0)
    return peers


def pyflink_python(*, install: bool = False) -> Path | None:
    """The python of the PyFlink 2.3 venv (benchmarks/compare's peer venv), or None if it is not installed.

    ``install``: create and install the venv if it is missing (pip, from PyPI; minutes).
    """
    peers = _peers()
    return peers.ensure_venv(
        peers.PEERS["pyflink"], peers.default_venv_dir(), install=install, log=lambda *a, **k: None
    )


def why_pyflink_cannot_run() -> str | None:
    """Why real PyFlink cannot run here (no venv, no java), or None."""
    if pyflink_python() is None:
        return (
            "no PyFlink 2.3 venv (benchmarks/compare/peers.py's): create it with "
            "`python3 -m tests.compat.record_pyflink_outputs --install --check`"
        )
    if shutil.which("java") is None:
        return "PyFlink needs java on PATH (Java 17)"
    return None


def run_on_pyflink(name: str, workdir: Path, *, timeout: float = 300) -> str:
    """Run program ``name`` unchanged on real PyFlink 2.3 (or its Java twin on Flink 2.3); its stdout.

    Raises:
        RuntimeError: PyFlink cannot run here (see :func:`why_pyflink_cannot_run`), or the program failed.
    """
    reason = why_pyflink_cannot_run()
    if reason is not None:
        raise RuntimeError(reason)
    python = pyflink_python()
    assert python is not None
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join([str(python.parent), env.get("PATH", "")])  # PyFlink's workers use `python`
    twin = PROGRAMS[name].java_twin
    if twin:
        return _run_java_twin(python, PROGRAMS_DIR / "java" / twin, workdir, env, timeout)
    return _run([str(python), str(program_path(name))], env, workdir, timeout)


def _run_java_twin(python: Path, source: Path, workdir: Path, env: dict[str, str], timeout: float) -> str:
    """Compile ``source`` against the jars of the PyFlink venv's wheel (Flink 2.3) and run it."""
    if shutil.which("javac") is None:
        raise RuntimeError(f"{source.name} needs javac on PATH (a JDK)")
    lib = subprocess.run(
        [str(python), "-c", "import os, pyflink; print(os.path.join(os.path.dirname(pyflink.__file__), 'lib'))"],
        capture_output=True, text=True, check=True, env=env,
    ).stdout.strip()  # fmt: skip
    classpath = os.pathsep.join([str(workdir), os.path.join(lib, "*")])
    _run(["javac", "-cp", classpath, "-d", str(workdir), str(source)], env, workdir, timeout)
    return _run(["java", "-cp", classpath, source.stem], env, workdir, timeout)
