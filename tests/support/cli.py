"""Running the ``flinklike`` command line in-process and reading its fixed-width tables."""

from __future__ import annotations

from flinklike_spark.cli import main

__all__ = ["CHANNEL_COLUMNS", "STATE_COLUMNS", "cli", "column", "header"]

STATE_COLUMNS = ["subtask", "key_group", "state_name", "state_kind", "key_repr", "value_repr"]
CHANNEL_COLUMNS = ["subtask", "direction", "gate", "channel", "sequence", "rows", "payload_bytes"]


def cli(capsys, *args: str) -> tuple[int, str, str]:
    """Run ``flinklike ARGS`` in-process; return (exit code, stdout, stderr)."""
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def header(out: str) -> list[str]:
    return out.splitlines()[0].split()


def column(out: str, name: str) -> list[str]:
    """Cells of a column of a fixed-width table whose cells contain no blanks."""
    index = header(out).index(name)
    return [line.split()[index] for line in out.splitlines()[1:]]
