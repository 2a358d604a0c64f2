"""The fenced code blocks of the Markdown documentation, as the docs test runs them.

Conventions of a fence's info string (the words after the language; GitHub
renders the block by its first word and ignores the rest):

- ```` ```python ```` / ```` ```bash ```` (also ``py``, ``sh``, ``shell``,
  ``console``): a block that runs, in a fresh temporary directory, with the
  repository on ``PYTHONPATH``.
- ``name=NAME``: names the block; ``continues=NAME`` runs it after the block
  ``NAME`` of the same page, in the same directory (Python blocks in one
  process, as one script: the later block uses the earlier one's variables).
  A block that another runnable block continues is run as part of that one.
- ``file=PATH``: the block is a file the page's other blocks use (a pipeline
  module, a ``config.yaml``): it is written to ``PATH`` in the directory before
  any block of the page runs, and is not run itself (any language).
- ``cwd=repo``: the block runs in the repository root (commands that name the
  checkout's files, such as ``zip ... flinklike_spark``); it must write only
  under a directory it creates (``mktemp -d``).
- ``no-run reason="..."``: the block is not run, for the stated reason (the
  reason is required). Keep these few.

Blocks in other languages (``yaml``, ``text``, none) are not run unless they
are ``file=`` blocks.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "PYTHON",
    "SHELL",
    "Block",
    "DocBlockError",
    "chain",
    "parse_blocks",
    "runnable_leaves",
]

PYTHON = "python"
SHELL = "shell"
_LANGUAGES = {"python": PYTHON, "py": PYTHON, "bash": SHELL, "sh": SHELL, "shell": SHELL, "console": SHELL}
_KEYS = {"name", "continues", "file", "cwd", "reason"}
_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


class DocBlockError(ValueError):
    """A block's info string breaks the conventions (names the page, line and what is wrong)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Block:
    """One fenced block: ``language`` is :data:`PYTHON`, :data:`SHELL` or the fence's own word."""

    page: Path
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    name: str | None = None
    continues: str | None = None
    file: str | None = None
    cwd_repo: bool = False
    no_run_reason: str | None = None

    @property
    def runs(self) -> bool:
        """A block that is run (itself or as part of a continuation)."""
        return self.language in (PYTHON, SHELL) and self.file is None and self.no_run_reason is None

    @property
    def where(self) -> str:
        return f"{self.page.name}:{self.line}"


def _parse_info(info: str, where: str) -> tuple[str, dict[str, str], bool]:
    try:
        words = shlex.split(info)
    except ValueError as error:
        raise DocBlockError(f"{where}: cannot parse the fence's info string {info!r}: {error}") from None
    if not words:
        return "", {}, False
    language, attributes, no_run = words[0].lower(), {}, False
    for word in words[1:]:
        if word == "no-run":
            no_run = True
            continue
        key, sep, value = word.partition("=")
        if not sep or key not in _KEYS:
            raise DocBlockError(
                f"{where}: unknown fence attribute {word!r}; valid: no-run, "
                + ", ".join(f"{k}=..." for k in sorted(_KEYS))
            )
        attributes[key] = value
    return language, attributes, no_run


def parse_blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page``, in order.

    Raises:
        DocBlockError: an unknown attribute, ``no-run`` without a non-empty
            ``reason``, a ``reason`` without ``no-run``, ``cwd=`` other than
            ``repo``, or an unclosed fence.
    """
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        fence, where = opening["fence"], f"{page.name}:{index + 1}"
        language, attributes, no_run = _parse_info(opening["info"], where)
        body, index = [], index + 1
        while index < len(lines) and not (
            lines[index].strip().startswith(fence) and set(lines[index].strip()) == {fence[0]}
        ):
            body.append(lines[index])
            index += 1
        if index == len(lines):
            raise DocBlockError(f"{where}: the fence opened here is never closed")
        index += 1
        reason = attributes.get("reason")
        if no_run and not (reason and reason.strip()):
            raise DocBlockError(f'{where}: a no-run block must say why: no-run reason="..."')
        if reason is not None and not no_run:
            raise DocBlockError(f"{where}: reason= is only for no-run blocks")
        if attributes.get("cwd", "repo") != "repo":
            raise DocBlockError(f"{where}: cwd={attributes['cwd']!r}; the only valid value is cwd=repo")
        blocks.append(
            Block(
                page=page,
                line=int(where.rsplit(":", 1)[1]),
                language=_LANGUAGES.get(language, language),
                code="\n".join(body) + "\n",
                name=attributes.get("name"),
                continues=attributes.get("continues"),
                file=attributes.get("file"),
                cwd_repo="cwd" in attributes,
                no_run_reason=reason if no_run else None,
            )
        )
    return blocks


def chain(block: Block, blocks: Iterable[Block]) -> list[Block]:
    """``block`` preceded by the blocks it continues (transitively), earliest first.

    Raises:
        DocBlockError: ``continues=`` names no earlier block of the page, or
            a block that is not run.
    """
    named = {}
    for other in blocks:
        if other.name is not None:
            if other.name in named:
                raise DocBlockError(f"{other.where}: name={other.name!r} is also {named[other.name].where}")
            named[other.name] = other
    steps = [block]
    while steps[0].continues is not None:
        current = steps[0]
        previous = named.get(current.continues)
        if previous is None or previous.line >= current.line:
            raise DocBlockError(
                f"{current.where}: continues={current.continues!r}, but no earlier block of the page has that "
                f"name (named blocks: {sorted(named)})"
            )
        if not previous.runs:
            raise DocBlockError(f"{current.where}: continues {previous.where}, which is not run")
        steps.insert(0, previous)
    return steps


def runnable_leaves(blocks: list[Block]) -> list[Block]:
    """The runnable blocks that no runnable block continues: running each one's chain runs every block."""
    continued = {b.continues for b in blocks if b.runs and b.continues is not None}
    return [b for b in blocks if b.runs and (b.name is None or b.name not in continued)]
