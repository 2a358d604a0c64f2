"""Record (or check) the output of the programs in ``tests/compat/programs/`` on real PyFlink 2.3.

    python3 -m tests.compat.record_pyflink_outputs            # re-record every expected output
    python3 -m tests.compat.record_pyflink_outputs metrics    # only some programs
    python3 -m tests.compat.record_pyflink_outputs --check    # compare with the recorded outputs (writes
                                                              # only verified.json, for those that match)
    python3 -m tests.compat.record_pyflink_outputs --install  # create the PyFlink venv first if it is missing

Each program runs unchanged (``from pyflink...``) with the PyFlink venv's python, as
``tests/compat/pyflink_programs.py`` describes; its standard output is written to
``programs/expected/<name>.out``. Every program whose recording real PyFlink printed (recorded, or
``--check`` found it the same) gets its digest in ``programs/expected/verified.json``. Exit status 1 if a
program fails or (``--check``) differs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `tests.compat` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.compat.pyflink_programs import (  # noqa: E402
    PROGRAMS,
    comparable,
    expected_path,
    pyflink_python,
    record_verified,
    run_on_pyflink,
    why_pyflink_cannot_run,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help=f"programs (default: all of {', '.join(PROGRAMS)})")
    parser.add_argument(
        "--check", action="store_true", help="compare with the recorded outputs; write only verified.json"
    )
    parser.add_argument("--install", action="store_true", help="create the PyFlink venv if it is missing")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in PROGRAMS]
    if unknown:
        parser.error(f"no such program: {', '.join(unknown)}; the programs are {', '.join(PROGRAMS)}")
    if args.install:
        pyflink_python(install=True)
    reason = why_pyflink_cannot_run()
    if reason is not None:
        print(f"cannot run PyFlink: {reason}", file=sys.stderr)
        return 1
    failed, verified = [], []
    for name in args.names or list(PROGRAMS):
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f"pyflink-{name}-") as workdir:
            try:
                output = run_on_pyflink(name, Path(workdir))
            except (RuntimeError, OSError) as exc:
                print(f"{name}: FAILED on PyFlink: {exc}", file=sys.stderr)
                failed.append(name)
                continue
        took = f"{time.monotonic() - started:.0f} s"
        path = expected_path(name)
        if args.check:
            same = path.exists() and comparable(name, path.read_text()) == comparable(name, output)
            print(f"{name}: {'matches' if same else 'DIFFERS from'} {path.name} ({took})")
            if not same:
                failed.append(name)
                continue
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(output)
            print(f"{name}: recorded {len(output.splitlines())} lines in {path.name} ({took})")
        verified.append(name)
    record_verified(verified)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
