"""Test modules have unique file names across ``tests/``.

The suite imports test modules by their base name (pytest's ``prepend`` import
mode, no ``__init__.py`` in test directories), and TaskExecutors unpickle the
functions a test defines by that module name: two ``test_x.py`` files make
pytest refuse one ("import file mismatch") and make jobs find the other one's
classes missing (seen: every test of one module failed in a full run, none alone).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(30)

TESTS = Path(__file__).resolve().parents[2]


def test_no_two_test_modules_share_a_file_name():
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("*.py"):
        if path.name.startswith("test_") and "resources" not in path.parts:
            by_name[path.name].append(str(path.relative_to(TESTS)))
    shared = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not shared, f"rename one of each: {shared}"
