"""Every code block of README.md and docs/*.md runs, so the documentation cannot rot.

Each runnable block (see the fence conventions in :mod:`tests.support.doc_blocks`)
runs in a subprocess, in a fresh temporary directory, with the repository on
``PYTHONPATH``, as a user runs a snippet saved to a file; a block that
continues another runs after it, in the same directory (consecutive Python
blocks as one script). A page's ``file=`` blocks are written into that
directory first; ``TMPDIR`` is inside it, so what a block puts in a temporary directory goes
with it. The block passes if it exits with status 0: blocks check
their own results (``assert``), so a block whose output went wrong fails.

Marks are derived from the code, so a new block cannot forget them: a chain
that uses Spark (``pyspark``, ``flinklike_spark.spark``, ``spark-submit``) is
``spark`` and ``slow``; one that runs a job (``execute(``, ``execute_async(``,
``execute_and_collect(``, ``flinklike run``) is ``slow``; the others are fast.

Object stores: a chain that names an ``s3://`` URL runs against moto's S3 server
(``s3_server`` of tests/objectstore/conftest.py). Its blocks are written for
a local MinIO (``http://127.0.0.1:9000``, path-style, bucket ``my-bucket``);
the test substitutes the moto server's endpoint for ``http://127.0.0.1:9000``
and creates ``my-bucket`` there. That is the only substitution.

New pages (``docs/<topic>.md``) are picked up without changing this file.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.objectstore.conftest import s3_server  # noqa: F401 - the fixture, used through getfixturevalue
from tests.support.doc_blocks import PYTHON, SHELL, Block, DocBlockError, chain, parse_blocks, runnable_leaves

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MINIO_ENDPOINT = "http://127.0.0.1:9000"
DOCS_BUCKET = "my-bucket"

_SPARK = re.compile(r"pyspark|flinklike_spark\.spark|spark-submit")
_JOB = re.compile(r"\.execute(_async|_and_collect)?\(|flinklike run\b")
_S3 = re.compile(r"\bs3a?://")
_TIMEOUTS = {"spark": 1500, "slow": 300, "fast": 90}  # a Spark chain starts Spark once and runs several queries


def _kind(code: str) -> str:
    if _SPARK.search(code):
        return "spark"
    return "slow" if _JOB.search(code) else "fast"


def _cases():
    for page in PAGES:
        try:
            blocks = parse_blocks(page)
            leaves = [(leaf, chain(leaf, blocks)) for leaf in runnable_leaves(blocks)]
        except DocBlockError as error:
            yield pytest.param(None, None, str(error), id=f"{page.name}:conventions")
            continue
        files = [b for b in blocks if b.file is not None]
        for leaf, steps in leaves:
            code = "".join(b.code for b in [*steps, *files])
            kind = _kind(code)
            marks = [pytest.mark.timeout(_TIMEOUTS[kind])]
            if kind == "spark":
                marks += [pytest.mark.spark, pytest.mark.slow]
            elif kind == "slow":
                marks.append(pytest.mark.slow)
            yield pytest.param(steps, files, None, id=leaf.where, marks=marks)


def _groups(steps: list[Block]) -> list[list[Block]]:
    """Consecutive Python blocks form one script; each shell block runs on its own."""
    groups: list[list[Block]] = []
    for block in steps:
        if block.language == PYTHON and groups and groups[-1][0].language == PYTHON:
            groups[-1].append(block)
        else:
            groups.append([block])
    return groups


def _run(command: list[str], *, cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """Runs ``command`` in a session of its own, killing the whole group (TaskExecutors, Spark) on timeout."""
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(
            f"{command} did not finish within {timeout} s\n--- stdout\n{stdout[-4000:]}\n--- stderr\n{stderr[-6000:]}"
        )
    finally:
        try:  # children a block left behind (a TaskExecutor of a crashed job)
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def _object_store(request) -> dict[str, str]:
    store = request.getfixturevalue("s3_server")
    import boto3

    endpoint = store.config["s3.endpoint"]
    client = boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=store.config["s3.access-key"],
        aws_secret_access_key=store.config["s3.secret-key"], region_name=store.config["s3.region"],
    )  # fmt: skip
    if DOCS_BUCKET not in {b["Name"] for b in client.list_buckets()["Buckets"]}:
        client.create_bucket(Bucket=DOCS_BUCKET)
    return {MINIO_ENDPOINT: endpoint}


@pytest.mark.parametrize(("steps", "files", "error"), list(_cases()))
def test_block_runs(steps, files, error, tmp_path, request):
    assert error is None, error
    code = "".join(b.code for b in [*steps, *files])
    substitutions = _object_store(request) if _S3.search(code) else {}

    def text(block: Block) -> str:
        out = block.code
        for old, new in substitutions.items():
            out = out.replace(old, new)
        return out

    for block in files:
        target = tmp_path / block.file
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text(block))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    env.pop("PYSPARK_PYTHON", None)  # session() sets it, as on a fresh machine
    (tmp_path / "tmp").mkdir()
    env["TMPDIR"] = str(tmp_path / "tmp")  # what a block puts in mkdtemp()/mktemp -d is removed with tmp_path
    timeout = _TIMEOUTS[_kind(code)] - 20
    for number, group in enumerate(_groups(steps)):
        script = tmp_path / f"doc_block_{number}.{'py' if group[0].language == PYTHON else 'sh'}"
        script.write_text("".join(text(b) for b in group))
        command = (
            [sys.executable, str(script)] if group[0].language == PYTHON else ["bash", "-euo", "pipefail", str(script)]
        )
        cwd = ROOT if group[-1].cwd_repo else tmp_path
        done = _run(command, cwd=cwd, env=env, timeout=timeout)
        where = ", ".join(b.where for b in group)
        traceback = done.stderr[done.stderr.rfind("Traceback (most recent call last)") :][:5000]
        assert done.returncode == 0, (
            f"the block(s) {where} exited with {done.returncode}\n--- stdout\n{done.stdout[-4000:]}\n"
            f"--- the last Python traceback\n{traceback}\n--- stderr\n{done.stderr[-4000:]}"
        )


def test_every_fence_language_is_run_or_known_prose():
    """A fence language the test does not know would be skipped silently: only these may appear."""
    known = {PYTHON, SHELL, "yaml", "text", "json", ""}
    for page in PAGES:
        for block in parse_blocks(page):
            assert block.language in known or block.file is not None, (
                f"{block.where}: fence language {block.language!r} is neither run nor known to be prose "
                f"(run: python, bash; shown only: {sorted(known - {PYTHON, SHELL})})"
            )


def test_readme_first_screen_has_the_two_commands():
    """The newcomer's two commands, exactly (CI runs the second), in the README's first 40 lines."""
    head = "\n".join((ROOT / "README.md").read_text().splitlines()[:40])
    assert 'python3 -m pip install -e ".[spark]" && python3 examples/fraud_detection.py' in head
    assert 'python3 -m pip install -e ".[test]" && python3 -m pytest' in head


def test_readme_links_every_docs_page():
    readme = (ROOT / "README.md").read_text()
    missing = [p.name for p in PAGES[1:] if f"(docs/{p.name})" not in readme]
    assert not missing, f"README.md's map of the docs does not link {missing}"


def test_docs_links_resolve():
    """Relative links between the pages point at files that exist (moved sections leave no dead link)."""
    dead = []
    for page in PAGES:
        for target in re.findall(r"\]\((?!https?://|#|mailto:)([^)#\s]+)", page.read_text()):
            if not (page.parent / target).exists():
                dead.append(f"{page.name} -> {target}")
    assert not dead, f"dead relative links: {dead}"


def test_code_cites_only_docs_that_exist():
    """Docstrings and messages point at docs of this repository: each ``docs/<page>.md`` cited exists, and
    none cites the design document that lives outside it (its decisions are in docs/architecture.md)."""
    design = "DESIGN" + ".md"  # spelled apart, so that this file does not cite it
    bad = []
    for package in ("flinklike_spark", "connectors", "checkpointing", "examples", "benchmarks", "tests"):
        for source in sorted((ROOT / package).rglob("*.py")):
            text = source.read_text(encoding="utf-8")
            for cited in re.findall(r"\bdocs/[\w./-]+\.md\b", text):
                if not (ROOT / cited).exists():
                    bad.append(f"{source.relative_to(ROOT)} cites {cited}, which does not exist")
            if design in text:
                bad.append(f"{source.relative_to(ROOT)} cites {design}, which is not in the repository")
    assert not bad, "\n".join(bad)


def test_no_example_reads_a_delta_table_through_the_python_filesystem_handler():
    """Docs blocks and examples end right after reading their results: deltalake's ``to_pyarrow_table()`` and
    ``to_pyarrow_dataset()`` read through a Python filesystem handler, and an Arrow I/O thread still releasing
    a buffer of it when the interpreter finalizes aborts the process ("terminate called without an active
    exception"); ``connectors.read_delta_table`` (or ``checkpointing.layout.scan_table``) reads natively."""
    risky = re.compile(r"\.to_pyarrow_(table|dataset)\(")
    sources = [(b.where, b.code) for page in PAGES for b in parse_blocks(page) if b.language == PYTHON]
    sources += [(str(p.relative_to(ROOT)), p.read_text()) for p in sorted((ROOT / "examples").rglob("*.py"))]
    bad = [where for where, code in sources if risky.search(code)]
    assert not bad, f"read Delta tables with connectors.read_delta_table instead: {bad}"
