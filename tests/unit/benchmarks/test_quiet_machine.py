"""benchmarks/quiet.py: when a run counts as a measurement, and whose CPU time counts as the run's own."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

from quiet import MAX_FOREIGN_SHARE, Quietness, QuietWatch  # noqa: E402

pytestmark = pytest.mark.timeout(60)

BUSY = "import time\nt = time.time()\nwhile time.time() - t < {s}: pass\n"


def quietness(load: float, foreign: float) -> Quietness:
    return Quietness(
        started=datetime(2026, 11, 29, tzinfo=UTC),
        load_start=(load, load, load),
        load_end=(1.9, 1.0, 0.5),
        peak_load=2.1,
        foreign_share=foreign,
        seconds=60,
    )


def test_a_quiet_run_is_a_measurement_and_gets_a_verdict():
    quiet = quietness(0.3, 0.02)
    assert quiet.is_measurement
    assert quiet.line().endswith(": a measurement")
    assert (quiet.verdict(True), quiet.verdict(False)) == ("met", "missed")


@pytest.mark.parametrize(
    ("load", "foreign", "reason"),
    [(0.7, 0.0, "started at load 0.70"), (0.2, 0.35, "other processes used 35% of the CPUs")],
)
def test_a_run_on_a_busy_machine_is_no_measurement_and_gets_no_verdict(load, foreign, reason):
    quiet = quietness(load, foreign)
    assert not quiet.is_measurement
    assert "NOT A MEASUREMENT" in quiet.line() and reason in quiet.line()
    assert quiet.verdict(True) == quiet.verdict(False) == "no verdict (not a measurement)"


def test_the_runs_own_children_are_its_own_and_a_stranger_is_not():
    """A busy child of the benchmark (a TaskExecutor, a JVM) is the run's own CPU time; a busy process
    outside its tree (double-forked here, as a daemon is) counts against the machine's quiet."""
    stranger = BUSY.format(s=3)
    with QuietWatch() as watch:
        subprocess.run([sys.executable, "-c", BUSY.format(s=2.5)], check=True)  # own
        own = watch._own_cpu() - watch._own0
        detach = f"import os, sys\nif os.fork(): sys.exit(0)\nos.setsid()\n{stranger}"
        subprocess.run([sys.executable, "-c", detach], check=True)
        time.sleep(3.2)
    assert own >= 0.3, own  # the child ran 2.5 s busy (on a loaded machine it gets less of a core)
    assert watch.result.foreign_share > MAX_FOREIGN_SHARE / 2, watch.result
    with pytest.raises(RuntimeError, match="has not ended"):
        QuietWatch().line()
