"""The fence conventions of the docs test (tests/support/doc_blocks.py): what runs, what chains, what is refused."""

from __future__ import annotations

import pytest

from tests.support.doc_blocks import PYTHON, SHELL, DocBlockError, chain, parse_blocks, runnable_leaves


def page(tmp_path, text: str):
    path = tmp_path / "page.md"
    path.write_text(text)
    return path


def test_blocks_their_attributes_and_what_runs(tmp_path):
    blocks = parse_blocks(
        page(
            tmp_path,
            (
                "intro\n"
                "```python name=setup\nx = 1\n```\n"
                "```python continues=setup\nprint(x)\n```\n"
                "```python file=my_jobs.py\ndef build(env): ...\n```\n"
                "```bash cwd=repo\nls flinklike_spark\n```\n"
                '```bash no-run reason="installs the package"\npip install .\n```\n'
                "```yaml\na: 1\n```\n"
            ),
        )
    )
    assert [(b.language, b.line) for b in blocks] == [
        (PYTHON, 2),
        (PYTHON, 5),
        (PYTHON, 8),
        (SHELL, 11),
        (SHELL, 14),
        ("yaml", 17),
    ]
    assert [b.runs for b in blocks] == [True, True, False, True, False, False]
    assert blocks[0].code == "x = 1\n" and blocks[2].file == "my_jobs.py" and blocks[3].cwd_repo
    assert blocks[4].no_run_reason == "installs the package"
    leaves = runnable_leaves(blocks)
    assert leaves == [blocks[1], blocks[3]]  # the named setup block runs as part of its continuation
    assert chain(blocks[1], blocks) == [blocks[0], blocks[1]]


@pytest.mark.parametrize(
    ("fence", "message"),
    [
        ("```python no-run\n", "must say why"),
        ('```python no-run reason=""\n', "must say why"),
        ('```python reason="why"\n', "only for no-run"),
        ("```python run-me\n", "unknown fence attribute 'run-me'"),
        ("```python cwd=/tmp\n", "the only valid value is cwd=repo"),
    ],
)
def test_bad_info_strings_are_refused(tmp_path, fence, message):
    with pytest.raises(DocBlockError, match=message):
        parse_blocks(page(tmp_path, fence + "x = 1\n```\n"))


def test_continuing_an_unknown_or_later_block_is_refused(tmp_path):
    blocks = parse_blocks(page(tmp_path, "```python continues=later\nx\n```\n```python name=later\ny\n```\n"))
    with pytest.raises(DocBlockError, match="no earlier block of the page has that name"):
        chain(blocks[0], blocks)


def test_an_unclosed_fence_is_refused(tmp_path):
    with pytest.raises(DocBlockError, match="never closed"):
        parse_blocks(page(tmp_path, "```python\nx = 1\n"))


def test_a_longer_fence_holds_a_shorter_one(tmp_path):
    (block,) = parse_blocks(page(tmp_path, "````markdown\n```python\nx\n```\n````\n"))
    assert block.language == "markdown" and "```python" in block.code
