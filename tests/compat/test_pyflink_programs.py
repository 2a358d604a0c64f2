"""PyFlink programs written for this suite (``programs/``: themes no upstream example covers) run here with
only their import prefix changed, and print what they print on real PyFlink 2.3 (``programs/expected/``,
recorded by ``record_pyflink_outputs.py``). See ``pyflink_programs.py`` for what each program covers and
how its output is compared."""

from __future__ import annotations

import difflib
import os
import shutil

import pytest

from tests.compat.pyflink_programs import (
    EXPECTED_DIR,
    PROGRAMS,
    PROGRAMS_DIR,
    comparable,
    expected_path,
    recording_digest,
    run_here,
    run_on_pyflink,
    verified_digests,
    why_pyflink_cannot_run,
)

#: ``FLINKLIKE_PYFLINK_RECHECK=all``: re-run every program on real PyFlink, verified or not.
RECHECK = os.environ.get("FLINKLIKE_PYFLINK_RECHECK", "")


def _params():
    for name, program in PROGRAMS.items():
        marks = [pytest.mark.xfail(reason=program.differs, strict=True)] if program.differs else []
        yield pytest.param(name, marks=marks, id=name)


def assert_same_output(name: str, expected: str, actual: str, *, what: str) -> None:
    want, got = comparable(name, expected), comparable(name, actual)
    diff = "\n".join(difflib.unified_diff(want, got, "PyFlink 2.3 (recorded)", what, lineterm=""))
    assert got == want, f"{name}: {what} differs from PyFlink's recorded output\n{diff}"


def test_every_program_is_described_and_recorded():
    on_disk = sorted(p.stem for p in PROGRAMS_DIR.glob("*.py"))
    assert on_disk == sorted(PROGRAMS), "programs/ and PROGRAMS (pyflink_programs.py) list different programs"
    recorded = sorted(p.stem for p in EXPECTED_DIR.glob("*.out"))
    assert recorded == sorted(PROGRAMS), "record the missing outputs: python3 -m tests.compat.record_pyflink_outputs"
    for name in PROGRAMS:
        source = (PROGRAMS_DIR / f"{name}.py").read_text()
        assert "flinklike_spark" not in source, f"{name}.py must be a PyFlink program (pyflink imports only)"
        assert expected_path(name).read_text().strip(), f"{name}: the recorded output is empty"
        twin = PROGRAMS[name].java_twin
        assert not twin or (PROGRAMS_DIR / "java" / twin).exists(), f"{name}: no Java twin java/{twin}"
    assert set(verified_digests()) <= set(PROGRAMS), "verified.json names programs that no longer exist"


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", list(_params()))
def test_program_prints_what_pyflink_prints(name, tmp_path):
    assert_same_output(name, expected_path(name).read_text(), run_here(name, tmp_path), what="flinklike_spark")


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_recorded_output_is_still_pyflinks(name, tmp_path):
    """The recording is what real PyFlink 2.3 prints for the program as it is now.

    Verified already when ``verified.json`` holds the digest of exactly these files
    (pyflink_programs.py); otherwise the program runs on real PyFlink now (when its venv is
    installed), and ``python3 -m tests.compat.record_pyflink_outputs --check`` records the new digest.
    """
    if RECHECK != "all" and verified_digests().get(name) == recording_digest(name):
        return  # record_pyflink_outputs saw real PyFlink print this recording of this program
    reason = why_pyflink_cannot_run()
    if reason is None and PROGRAMS[name].java_twin and shutil.which("javac") is None:
        reason = f"its Java twin {PROGRAMS[name].java_twin} needs javac on PATH (a JDK)"
    if reason is not None:
        pytest.skip(reason)
    assert_same_output(name, expected_path(name).read_text(), run_on_pyflink(name, tmp_path), what="PyFlink 2.3 now")
