"""PyFlink's example programs (``pyflink/examples/datastream`` of apache-flink 2.3.0, read from the
released wheel) run here with only their import prefix changed, and give PyFlink's results.

Each expectation is derived from the example's input by hand (or computed in plain Python);
the examples' own comments state the same results. Not run: the Kafka, Pulsar and
Elasticsearch examples (no such connectors here: Spark reads them), the Table API ones
(``streaming_word_count.py``: no Table API) and ``asyncio/remote_model_inference.py``
(it loads a model from a hub).
"""

from __future__ import annotations

import ast
import math
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.compat.pyflink_sources import upstream_source, with_imports_changed

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]


def run_example(path: str, tmp_path: Path, *args: str) -> list:
    """Run ``pyflink/examples/datastream/<path>`` with its imports changed; its printed records."""
    return [printed_record(line) for line in printed_lines(path, tmp_path, *args) if line.startswith("(")]


def printed_lines(path: str, tmp_path: Path, *args: str) -> list[str]:
    """Run ``pyflink/examples/datastream/<path>`` with its imports changed; the lines it prints."""
    program = tmp_path / Path(path).name
    program.write_text(with_imports_changed(upstream_source(f"examples/datastream/{path}")))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, str(program), *args], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=240)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


def printed_record(line: str) -> tuple:
    """A printed tuple: a Python literal (an undeclared stream prints ``str(record)``) or, as PyFlink prints a
    stream declared ``Types.TUPLE``, Java's ``Tuple.toString`` (``(hi,0,5,4)``; the examples' values hold no
    commas)."""
    try:
        return ast.literal_eval(line)
    except (ValueError, SyntaxError):
        return tuple(_java_value(text) for text in line[1:-1].split(","))


def _java_value(text: str):
    if text in ("true", "false", "null"):
        return {"true": True, "false": False, "null": None}[text]
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            pass
    return text


def close(actual: list, expected: list) -> bool:
    """Same records (any order), floats equal to 32-bit precision (Types.FLOAT)."""
    if len(actual) != len(expected):
        return False
    key = lambda record: tuple(round(v, 3) if isinstance(v, float) else v for v in record)  # noqa: E731
    return all(
        all(math.isclose(x, y, rel_tol=1e-6) if isinstance(x, float) else x == y for x, y in zip(a, e))
        for a, e in zip(sorted(actual, key=key), sorted(expected, key=key))
    )


def test_windowing_tumbling_time_window(tmp_path):
    # ('hi', t) for t in 1, 2, 3, 4, 5, 8, 9, 15; 5 ms tumbling windows counted per window
    assert sorted(run_example("windowing/tumbling_time_window.py", tmp_path)) == [
        ("hi", 0, 5, 4), ("hi", 5, 10, 3), ("hi", 15, 20, 1),
    ]  # fmt: skip


def test_windowing_sliding_time_window(tmp_path):
    times = [1, 2, 3, 4, 5, 8, 9, 15]  # 5 ms windows sliding by 2 ms
    expected = sorted(
        ("hi", start, start + 5, sum(start <= t < start + 5 for t in times))
        for start in range(-4, 16, 2) if any(start <= t < start + 5 for t in times)
    )  # fmt: skip
    assert sorted(run_example("windowing/sliding_time_window.py", tmp_path)) == expected


def test_windowing_session_with_gap_window(tmp_path):
    # times 1, 2, 3, 4, 8, 9, 15 with a 5 ms gap: [1, 9 + 5) holds six, [15, 20) one
    assert sorted(run_example("windowing/session_with_gap_window.py", tmp_path)) == [
        ("hi", 1, 14, 6),
        ("hi", 15, 20, 1),
    ]


def test_windowing_session_with_dynamic_gap_window(tmp_path):
    # each element's gap is its own timestamp: [t, 2t) windows, which all touch and merge into [1, 30)
    assert run_example("windowing/session_with_dynamic_gap_window.py", tmp_path) == [("hi", 1, 30, 7)]


def test_windowing_tumbling_count_window(tmp_path):
    # count windows of 2 per key, summed: hi 1+3; hello 2+4, 6+6; the third 'hi' waits for a second
    assert sorted(run_example("windowing/tumbling_count_window.py", tmp_path)) == [
        ("hello", 6), ("hello", 12), ("hi", 4),
    ]  # fmt: skip


ALICE, BOB = [110.1, 20.0, 13.1, 20.1], [30.2, 53.1, 3.1, 16.1]  # the examples' amounts, in input order


def test_state_access(tmp_path):
    rolling = [("Alice", sum(ALICE[: i + 1])) for i in range(4)] + [("Bob", sum(BOB[: i + 1])) for i in range(4)]
    assert close(run_example("state_access.py", tmp_path), rolling)


def test_event_time_timer(tmp_path):
    # every element registers a timer 2 s after it; all fire at the end, each printing its key's total
    totals = [("Alice", sum(ALICE))] * 4 + [("Bob", sum(BOB))] * 4
    assert close(run_example("event_time_timer.py", tmp_path), totals)


def test_basic_operations(tmp_path):
    records = run_example("basic_operations.py", tmp_path)
    tels = {1: 123, 2: 135, 3: 124, 4: 32}
    updated = [(i, t + 1) for i, t in tels.items()]
    assert [(i, ast.literal_eval(info.replace("null", "None"))["tel"]) for i, info in records[:4]] == updated
    assert records[4][0] == 1 and '"tel": 124' in records[4][1]  # filter id == 1, then the map
    assert records[5:] == [("Germany", 123), ("China", 135), ("USA", 124), ("China", 167)]  # rolling sum by country


def test_process_json_data(tmp_path):
    records = run_example("process_json_data.py", tmp_path)
    assert [(i, data["tel"], data["addr"]["country"]) for i, data in records] == [(2, 136, "China"), (4, 33, "China")]


def word_count_data(tmp_path: Path) -> list[str]:
    namespace: dict = {}
    source = with_imports_changed(upstream_source("examples/datastream/word_count.py"))
    exec(compile(source.split("\ndef word_count")[0], "word_count.py", "exec"), namespace)  # its data only
    return namespace["word_count_data"]


def test_word_count_in_batch_mode_prints_each_words_final_count(tmp_path):
    expected = Counter(word for line in word_count_data(tmp_path) for word in line.split())
    # Printed as PyFlink prints its Types.TUPLE([STRING, INT]) stream, (word,count); words hold commas
    pairs = [line[1:-1].rsplit(",", 1) for line in printed_lines("word_count.py", tmp_path) if line.startswith("(")]
    assert sorted((word, int(count)) for word, count in pairs) == sorted(expected.items())


def test_word_count_with_pyflinks_file_source_and_file_sink(tmp_path):
    lines = ["to be or not to be", "that is the question", "to be"]
    (tmp_path / "input.txt").write_text("\n".join(lines) + "\n")
    run_example("word_count.py", tmp_path, "--input", str(tmp_path / "input.txt"), "--output", str(tmp_path / "out"))
    parts = sorted((tmp_path / "out").glob("prefix-*.ext"))  # OutputFileConfig: part prefix and suffix
    assert parts, sorted(p.name for p in (tmp_path / "out").iterdir())
    written = [ast.literal_eval(line) for part in parts for line in part.read_text().splitlines()]
    assert sorted(written) == sorted(Counter(w for line in lines for w in line.split()).items())
