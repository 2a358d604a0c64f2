"""docs/architecture.md stays a map: short, its module map matching the tree, no history in it.

The module map is the section ``## Module map`` up to the next ``## `` heading; every
package is one list item of the form ``- `path/` — what it owns``, one line each.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(30)

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
PRODUCT_ROOTS = ("flinklike_spark", "connectors", "checkpointing")
MAX_LINES = 600
MAP_HEADING = "## Module map"
_ITEM = re.compile(r"^- `(?P<path>[^`]+)` — \S")
# History belongs to git: "issue 12", "issue #12", "round 5", "(was: ...)".
_HISTORY = re.compile(r"\bissues?\s*#?\d+|\brounds?\s+\d+|\(was:", re.IGNORECASE)


def packages_in_tree(root: Path = ROOT) -> set[str]:
    """Every package directory (one holding ``__init__.py``) of the product, as ``path/`` relative to ``root``."""
    found = set()
    for top in PRODUCT_ROOTS:
        for init in (root / top).rglob("__init__.py"):
            relative = init.parent.relative_to(root)
            if any(part.startswith((".", "__pycache__")) for part in relative.parts):
                continue
            found.add(relative.as_posix() + "/")
    return found


def module_map_lines(text: str) -> list[str]:
    """The lines of the module-map section (without its heading)."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == MAP_HEADING]
    assert len(starts) == 1, f"docs/architecture.md needs exactly one '{MAP_HEADING}' section, found {len(starts)}"
    section = []
    for line in lines[starts[0] + 1 :]:
        if line.startswith("## "):
            break
        section.append(line)
    return section


def listed_packages(section: list[str]) -> list[str]:
    """The package paths the map lists, in order, normalised to ``path/``; malformed items fail."""
    listed, malformed = [], []
    for number, line in enumerate(section, 1):
        if line.startswith("- "):
            match = _ITEM.match(line)
            if match is None:
                malformed.append(line)
            else:
                listed.append(match["path"].rstrip("/") + "/")
        elif line.startswith((" ", "\t")) and line.strip():
            malformed.append(f"(continuation line {number} of the section) {line.strip()}")
    assert not malformed, (
        "docs/architecture.md's module map: each package is one line '- `path/` — what it owns'; "
        f"these lines are not: {malformed}"
    )
    return listed


def test_the_architecture_page_is_at_most_600_lines():
    lines = len(DOC.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, (
        f"docs/architecture.md has {lines} lines (limit {MAX_LINES}): it is a map, not a changelog; "
        "shorten decisions or move history to commit messages"
    )


def test_the_module_map_lists_every_package_exactly_once():
    listed = listed_packages(module_map_lines(DOC.read_text(encoding="utf-8")))
    tree = packages_in_tree()
    twice = sorted(path for path, count in Counter(listed).items() if count > 1)
    missing = sorted(tree - set(listed))
    extra = sorted(set(listed) - tree)
    assert not (twice or missing or extra), (
        "docs/architecture.md's module map does not match the tree; update the map "
        f"('{MAP_HEADING}', one line per package). Missing packages: {missing}; listed but not a package: "
        f"{extra}; listed more than once: {twice}"
    )


def test_no_history_in_the_architecture_page():
    """No issue or round numbers (headings especially), no "(was: ...)": the page says what holds now."""
    hits = [
        f"line {number}: {line.strip()}"
        for number, line in enumerate(DOC.read_text(encoding="utf-8").splitlines(), 1)
        if _HISTORY.search(line)
    ]
    assert not hits, f"docs/architecture.md records history (it belongs in git): {hits}"


def test_issue_numbered_headings_are_found():
    assert _HISTORY.search("## Spare TaskExecutors (issue 31 item 4)")
    assert _HISTORY.search("### Round 5: retention")
    assert _HISTORY.search("retention deletes files (was: vacuum)")
    assert not _HISTORY.search("## Spare TaskExecutors")
    assert not _HISTORY.search("a round trip per message (delta-io/delta-rs#2184)")


def test_the_map_check_names_missing_extra_and_repeated_packages(tmp_path):
    for package in ("flinklike_spark", "flinklike_spark/_runtime/network", "connectors", "checkpointing"):
        (tmp_path / package).mkdir(parents=True)
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "flinklike_spark/_runtime/rest/static").mkdir(parents=True)  # not a package
    assert packages_in_tree(tmp_path) == {
        "flinklike_spark/",
        "flinklike_spark/_runtime/network/",
        "connectors/",
        "checkpointing/",
    }
    section = module_map_lines(
        "# A\n\n## Module map\n\nintro\n\n### Runtime\n\n"
        "- `flinklike_spark/_runtime/network/` — network\n"
        "- `connectors` — connectors\n"
        "- `connectors/` — again\n\n"
        "## Next\n- `checkpointing/` — outside the section\n"
    )
    assert listed_packages(section) == ["flinklike_spark/_runtime/network/", "connectors/", "connectors/"]
    with pytest.raises(AssertionError, match="one line"):
        listed_packages(["- `connectors/` — connectors,", "  continued"])
    with pytest.raises(AssertionError, match="one line"):
        listed_packages(["- connectors/ without backticks"])
